"""`gameday lab build`: the compose lab's image, built here, offline-capable.

- The base is BASE_IMAGE (debian:bookworm-slim). When it is not on the machine and cannot be
  pulled (no registry, as on air-gapped and many proxied workshop networks), an equivalent base
  is made offline: `mmdebstrap --variant=minbase bookworm` and `docker import`.
- Python packages come only from wheels built on the host (`pip wheel`), installed in the image
  with `--no-index`; Debian packages (python3, prometheus, node-exporter) over plain http.
- The image is tagged with a hash of its inputs (the Dockerfile, the package sources, the pinned
  engine requirements, the base image's id): an unchanged input set is not rebuilt.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import LabError
from runner.spec.inventory import ComposeSpec

OFFLINE_BASE = "gameday/debian:bookworm-mmdebstrap"
# What the lab engine imports (see labengine/); pinned to the versions installed here, so the
# image runs what the tests ran.
ENGINE_REQUIREMENTS = ("starlette", "uvicorn", "prometheus-client")
ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "compose" / "Dockerfile"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuildResult:
    image: str
    tag: str
    built: bool  # False: the cached image matched every input
    base: str
    seconds: float


def docker_client() -> Any:
    """A docker SDK client, or LabError naming what to do."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise LabError("the docker SDK is not installed", hint="pip install docker") from exc
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:
        raise LabError(
            f"Docker is not running or not reachable ({_first_line(exc)})",
            hint="start the Docker engine (`dockerd`, or `systemctl start docker`) and check "
            "`docker info`; DOCKER_HOST says which engine to use",
        ) from exc
    return client


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def requirements() -> list[str]:
    out = []
    for name in ENGINE_REQUIREMENTS:
        try:
            out.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(name)
    return out


def inputs_hash(base_id: str) -> str:
    h = hashlib.sha256()
    h.update(DOCKERFILE.read_bytes())
    h.update(base_id.encode())
    h.update(" ".join(requirements()).encode())
    h.update((ROOT / "pyproject.toml").read_bytes())
    for pkg in ("labengine", "runner", "vllmfacts"):
        for f in sorted((ROOT / pkg).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(ROOT)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def ensure_base(client: Any, base: str, progress: Progress) -> str:
    """The base image's name: BASE_IMAGE if present or pullable, else the offline one."""
    import docker

    for name in (base, OFFLINE_BASE):
        try:
            client.images.get(name)
            return name
        except docker.errors.ImageNotFound:
            pass
    progress(f"pulling {base}")
    try:
        client.images.pull(base)
        return base
    except docker.errors.APIError as exc:
        progress(f"cannot pull {base} ({_first_line(exc)}); making an offline base")
    return make_offline_base(client, progress)


def make_offline_base(client: Any, progress: Progress) -> str:
    if shutil.which("mmdebstrap") is None:
        raise LabError(
            "no base image: BASE_IMAGE cannot be pulled and mmdebstrap is not installed",
            hint="apt-get install -y mmdebstrap (it makes a Debian base offline), or load a "
            "debian:bookworm-slim image with `docker load`",
        )
    with tempfile.TemporaryDirectory(prefix="gameday-base-") as tmp:
        tar = Path(tmp) / "base.tar"
        progress("mmdebstrap --variant=minbase bookworm (about 30 s)")
        proc = subprocess.run(
            ["mmdebstrap", "--variant=minbase", "--quiet", "bookworm", str(tar)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise LabError(
                "mmdebstrap could not make the offline base image: "
                + (proc.stderr.strip().splitlines() or ["(no output)"])[-1],
                hint="it needs a Debian mirror over http (see /etc/apt/sources.list*)",
            )
        repo, tag = OFFLINE_BASE.split(":")
        client.api.import_image(src=str(tar), repository=repo, tag=tag, changes=['CMD ["bash"]'])
    return OFFLINE_BASE


def _wheels(dest: Path) -> None:
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(dest)]
    for args in (requirements(), ["--no-deps", str(ROOT)]):
        proc = subprocess.run([*pip, *args], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise LabError(
                "pip could not build the lab's wheels: "
                + (proc.stderr.strip().splitlines() or ["(no output)"])[-1],
                hint="the wheels are built on this machine from the Python index (or your "
                "mirror: PIP_INDEX_URL); the image installs them with --no-index",
            )


def build(
    spec: ComposeSpec, progress: Progress, *, force: bool = False, no_cache: bool = False
) -> BuildResult:
    import docker

    t0 = time.monotonic()
    if not (ROOT / "pyproject.toml").exists() or not DOCKERFILE.exists():
        raise LabError(
            f"the lab image is built from the source checkout, and {ROOT} is not one",
            hint="run `gameday lab build` from a clone of the gameday repository",
        )
    client = docker_client()
    base = ensure_base(client, spec.base_image, progress)
    base_id = client.images.get(base).id
    digest = inputs_hash(base_id)
    repo = spec.image.rsplit(":", 1)[0]
    tag = f"{repo}:{digest}"
    if not (force or no_cache):
        try:
            client.images.get(tag).tag(spec.image)
            return BuildResult(spec.image, tag, False, base, time.monotonic() - t0)
        except docker.errors.ImageNotFound:
            pass
    with tempfile.TemporaryDirectory(prefix="gameday-build-") as tmp:
        ctx = Path(tmp)
        progress("building wheels on the host")
        _wheels(ctx / "wheels")
        shutil.copy(DOCKERFILE, ctx / "Dockerfile")
        progress(f"docker build {tag} FROM {base}")
        try:
            image, _ = client.images.build(
                path=str(ctx),
                tag=tag,
                buildargs={
                    "BASE_IMAGE": base,
                    "ENGINE_REQUIREMENTS": " ".join(requirements()),
                },
                labels={"gameday.image": "lab", "gameday.inputs": digest},
                rm=True,
                forcerm=True,
                nocache=no_cache,
            )
        except docker.errors.BuildError as exc:
            tail = [str(c.get("stream", c.get("error", ""))).strip() for c in exc.build_log]
            tail = [t for t in tail if t][-5:]
            raise LabError(
                f"docker build of the lab image failed: {exc.msg}",
                hint="; ".join(tail) or "see `docker build compose/`",
            ) from exc
        image.tag(spec.image)
    return BuildResult(spec.image, tag, True, base, time.monotonic() - t0)
