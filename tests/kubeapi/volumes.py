"""Pod volumes for the stand-in's kubelet: `configMap`, `secret`, `emptyDir` and `projected`
(configMap and secret sources) materialised as files in a per-pod directory.

A container process here has no root filesystem of its own, so a volume cannot appear at its
`mountPath`. Instead every argument of the container's command and args that names a mount path,
or a path under it (`/etc/prometheus/prometheus.yml`, `--config.file=/etc/prometheus/x.yml`),
is rewritten to the pod's directory for that volume. A file inside a volume that names another by
a path relative to itself needs no rewrite.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

Lookup = Callable[[str, str], dict[str, Any] | None]  # (resource, name) -> object or None


class MissingSource(Exception):
    """A volume's ConfigMap or Secret does not exist (yet): the kubelet's FailedMount."""


def _files(obj: dict[str, Any], binary: bool) -> dict[str, bytes]:
    data = obj.get("data") or {}
    if binary:
        return {k: base64.b64decode(v) for k, v in data.items()}
    out = {k: str(v).encode() for k, v in data.items()}
    out |= {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
    return out


def _source(
    kind: str, spec: dict[str, Any], lookup: Lookup, volume: str
) -> list[tuple[str, bytes, int | None]]:
    """(path in the volume, content, mode or None) for one configMap or secret source."""
    res, name = ("secrets", spec["secretName"]) if "secretName" in spec else (kind, spec["name"])
    obj = lookup(res, name)
    if obj is None:
        if spec.get("optional"):
            return []
        singular = "secret" if res == "secrets" else "configmap"
        raise MissingSource(
            f'MountVolume.SetUp failed for volume "{volume}" : {singular} "{name}" not found'
        )
    files = _files(obj, binary=res == "secrets")
    items = spec.get("items")
    if not items:
        return [(k, v, None) for k, v in files.items()]
    return [(it["path"], files[it["key"]], it.get("mode")) for it in items if it["key"] in files]


def materialise(volumes: list[dict[str, Any]], root: Path, lookup: Lookup) -> dict[str, Path]:
    """Write each volume under root/<volume name>; the directory of each, by name."""
    out: dict[str, Path] = {}
    for vol in volumes:
        name = vol["name"]
        target = root / name
        target.mkdir(parents=True, exist_ok=True)
        files: list[tuple[str, bytes, int | None]] = []
        mode = 0o644
        if "configMap" in vol:
            files = _source("configmaps", vol["configMap"], lookup, name)
            mode = vol["configMap"].get("defaultMode", mode)
        elif "secret" in vol:
            files = _source("secrets", vol["secret"], lookup, name)
            mode = vol["secret"].get("defaultMode", mode)
        elif "projected" in vol:
            mode = vol["projected"].get("defaultMode", mode)
            for src in vol["projected"].get("sources") or []:
                if "configMap" in src:
                    files += _source("configmaps", src["configMap"], lookup, name)
                elif "secret" in src:
                    spec = {"secretName": src["secret"]["name"], **src["secret"]}
                    files += _source("secrets", spec, lookup, name)
        elif "emptyDir" not in vol:
            continue  # a volume type the stand-in does not serve: nothing to mount
        for rel, content, own_mode in files:
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(own_mode if own_mode is not None else mode)
        out[name] = target
    return out


def mounts(container: dict[str, Any], dirs: dict[str, Path]) -> dict[str, str]:
    """mountPath -> the pod's directory for it (subPath included)."""
    out: dict[str, str] = {}
    for m in container.get("volumeMounts") or []:
        if m["name"] in dirs:
            out[m["mountPath"].rstrip("/") or "/"] = str(dirs[m["name"]] / m.get("subPath", ""))
    return out


def rewrite(argv: list[str], mount_map: dict[str, str]) -> list[str]:
    """Each argument naming a mount path, or a path under it, alone or after `=`, names the
    pod's directory instead; the longest mount path wins."""
    if not mount_map:
        return argv
    paths = sorted(mount_map, key=len, reverse=True)
    rx = re.compile(r"(^|=)(" + "|".join(re.escape(p) for p in paths) + r")(?=/|$)")
    return [rx.sub(lambda m: m.group(1) + mount_map[m.group(2)].rstrip("/"), a) for a in argv]


def rewrite_listen(argv: list[str], ip: str) -> list[str]:
    """`--web.listen-address=0.0.0.0:P` or `=:P` (and the two-argument form) bind the pod IP:
    all of a pod's addresses are its IP."""
    out = list(argv)
    for i, a in enumerate(out):
        m = re.fullmatch(r"(--web\.listen-address=)(0\.0\.0\.0)?:(\d+)", a)
        if m:
            out[i] = f"{m.group(1)}{ip}:{m.group(3)}"
        elif i and out[i - 1] == "--web.listen-address":
            m2 = re.fullmatch(r"(0\.0\.0\.0)?:(\d+)", a)
            if m2:
                out[i] = f"{ip}:{m2.group(2)}"
    return out
