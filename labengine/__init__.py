"""The lab engine: a GPU-less stand-in for `vllm serve`.

It is launched like `vllm serve` (same subcommand, flags and VLLM_* environment), reads the model's
real `config.json` and checkpoint index, and goes through vLLM's start-up phases with vLLM's
messages, memory arithmetic and exit codes, then serves vLLM's OpenAI-compatible API and metrics.
Phase durations are the real ones divided by ``GAMEDAY_TIME_SCALE``.

Lab-only settings use the ``GAMEDAY_`` prefix so that they never trigger vLLM's unknown-variable
warning:

- ``GAMEDAY_TIME_SCALE``: how much faster than real time the phases run (default 1).
- ``GAMEDAY_GPU``: simulated GPU type (``a10g``, ``l4``, ``a100-80g``, ``h100``; default ``a10g``).
- ``GAMEDAY_GPU_COUNT``: GPUs on the node (default 1); ``CUDA_VISIBLE_DEVICES`` narrows them.
- ``GAMEDAY_VLLM_ERA``: message wording, ``0.19`` (default, the EKS start-failure write-up's
  version) or ``0.33``.
- ``GAMEDAY_MODELS_PATH``: extra directories (``:``-separated) searched for model repositories.
"""

from vllmfacts.wording import Era

__all__ = ["Era"]
