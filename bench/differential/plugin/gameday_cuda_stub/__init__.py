"""vLLM's `vllm.platform_plugins` entry point: the CUDA platform class without a GPU.

Active only when GAMEDAY_CUDA_STUB=1, so that the same venv also runs real vLLM's CPU platform.
"""

from __future__ import annotations

import os


def activate() -> str | None:
    if os.environ.get("GAMEDAY_CUDA_STUB") != "1":
        return None
    return "gameday_cuda_stub.platform.StubCudaPlatform"
