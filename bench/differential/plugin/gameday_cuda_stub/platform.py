"""NonNvmlCudaPlatform as one A10G node sees it: the GPU count of the pod, the A10G's name,
compute capability and memory (vLLM asks for the capability while importing its kernels; the CPU
torch cannot answer).

vllm.platforms.cuda and vllm.vllm_flash_attn import vLLM's compiled CUDA ops (`vllm._C`,
`vllm._C_stable_libtorch`, `_vllm_fa2_C`: linked against libtorch_cuda and libcudart, which the
CPU torch does not ship) only to register them; nothing before the configuration checks calls
them, so empty modules stand in for them. The capability queries that vLLM's modules call while
importing (can CUTLASS run this kind of GEMM on this GPU) are registered as ops that answer no.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types

for _ops in ("vllm._C", "vllm._C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa2_C"):
    sys.modules.setdefault(_ops, types.ModuleType(_ops))

import torch  # noqa: E402

_LIB = torch.library.Library("_C", "FRAGMENT")
for _query in (
    "cutlass_scaled_mm_supports_fp4",
    "cutlass_scaled_mm_supports_fp8",
    "cutlass_scaled_mm_supports_block_fp8",
    "cutlass_group_gemm_supported",
    "mxfp4_experts_quant_supported",
):
    _LIB.define(f"{_query}(int cuda_device_capability) -> bool")
    _LIB.impl(_query, lambda capability: False, "CompositeExplicitAutograd")

from vllm.platforms.cuda import NonNvmlCudaPlatform  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402

A10G_MIB = 23028  # as nvidia-smi reports an A10G (the EKS start-failure write-up's g5.xlarge)


def _visible() -> int:
    # As a pod sees its GPUs: the device plugin sets CUDA_VISIBLE_DEVICES to its own.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return len([d for d in visible.split(",") if d.strip()])


# 0.19's world-size check asks the driver through vllm.utils.torch_utils (the CPU torch answers 0)
with contextlib.suppress(ImportError):
    from vllm.utils import torch_utils

    if hasattr(torch_utils, "_cuda_device_count_stateless"):
        torch_utils._cuda_device_count_stateless = lambda cuda_visible_devices=None: _visible()


class StubCudaPlatform(NonNvmlCudaPlatform):
    @classmethod
    def device_count(cls) -> int:
        return _visible()

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
        return DeviceCapability(major=8, minor=6)

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return "NVIDIA A10G"

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return A10G_MIB * 2**20
