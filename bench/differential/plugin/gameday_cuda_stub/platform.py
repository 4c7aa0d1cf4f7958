"""NonNvmlCudaPlatform with the GPU count of the pod it stands for.

vllm.platforms.cuda imports vLLM's compiled CUDA ops (`vllm._C_stable_libtorch`, linked against
libtorch_cuda and libcudart, which the CPU torch does not ship) only to register them; nothing
before the configuration checks calls them, so an empty module stands in for it.
"""

from __future__ import annotations

import os
import sys
import types

sys.modules.setdefault("vllm._C_stable_libtorch", types.ModuleType("vllm._C_stable_libtorch"))

from vllm.platforms.cuda import NonNvmlCudaPlatform  # noqa: E402


class StubCudaPlatform(NonNvmlCudaPlatform):
    @classmethod
    def device_count(cls) -> int:
        # As a pod sees its GPUs: the device plugin sets CUDA_VISIBLE_DEVICES to its own.
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return len([d for d in visible.split(",") if d.strip()])
