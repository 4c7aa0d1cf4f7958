"""vLLM's environment variables (vllm/envs.py): the known names, the unknown-name warning and the
VLLM_PORT parsing that trips on Kubernetes service links."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib.resources import files

from vllmfacts.wording import Era, vllm_port_not_int, vllm_port_uri

# urllib3.util.parse_url's test for a scheme, which vLLM's get_vllm_port() calls: a letter, then
# letters, digits, "+" or "-", then ":". So `localhost:8000` has a scheme and `10.0.0.1:8000` has
# none. The engine image carries no urllib3, hence the one regular expression.
_URI_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+-]*:")


# The lab engine's own variables (labengine/mamba.py: VLLM_LAB_BUILD): no vLLM reads them, and the
# compose lab keeps them on the engine container (it takes GAMEDAY_* as its own).
LAB = "VLLM_LAB_"


class EnvError(ValueError):
    pass


@cache
def known(era: Era) -> frozenset[str]:
    """The VLLM_* names of `environment_variables` in that era's vllm/envs.py (data/envs.json)."""
    raw = json.loads(files("vllmfacts").joinpath("data", "envs.json").read_text("utf-8"))
    return frozenset(raw[era.value])


# The names either era knows: the runner refuses a near miss of one in a scenario or an edit.
KNOWN = known(Era.V0_19) | known(Era.V0_33)


def unknown_names(era: Era, env: Mapping[str, str]) -> list[str]:
    """The names vLLM's validate_environ() calls unknown: VLLM_* and not in envs.py."""
    names = known(era)
    return [k for k in env if k.startswith("VLLM_") and k not in names and not k.startswith(LAB)]


def vllm_port(era: Era, env: Mapping[str, str]) -> int | None:
    """envs.get_vllm_port(): None when unset; ValueError for a URI or a non-integer."""
    raw = env.get("VLLM_PORT")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        if _URI_SCHEME.match(raw):
            raise EnvError(vllm_port_uri(era, raw)) from None
        raise EnvError(vllm_port_not_int(raw)) from exc


def truthy(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes")
