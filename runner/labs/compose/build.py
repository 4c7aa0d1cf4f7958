"""`gameday lab build`: the compose lab's image, built here, offline-capable.

- The base is BASE_IMAGE (debian:bookworm-slim). When it is not on the machine and cannot be
  pulled (no registry, as on air-gapped and many proxied workshop networks), an equivalent base
  is made offline: `mmdebstrap --variant=minbase bookworm` and `docker import`.
- Python packages come only from wheels built on the host (`pip wheel`), installed in the image
  with `--no-index`; Debian packages (python3, prometheus, node-exporter) over plain http.
- gameday itself goes into the image as a wheel. In a checkout `pip wheel` builds it from the
  sources; from an installed package (no sources) the installed distribution's own files, as its
  RECORD lists them, are packed back into a wheel: the image runs the version the user installed,
  and nothing is fetched from an index that may not have it.
- The image is tagged with a hash of its inputs (the Dockerfile, gameday's files: the checkout's
  sources or the installed distribution's, the pinned engine requirements, the base image's id):
  an unchanged input set is not rebuilt.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from runner.errors import LabError
from runner.labs.compose.project import PACKAGED_DOCKERFILE
from runner.spec.inventory import ComposeSpec

OFFLINE_BASE = "gameday/debian:bookworm-mmdebstrap"
# What the lab engine imports (labengine/ and the vllmfacts/ it reads); pinned to the versions
# installed here, so the image runs what the tests ran.
ENGINE_REQUIREMENTS = ("starlette", "uvicorn", "prometheus-client", "pydantic", "httpx")
ROOT = Path(__file__).resolve().parents[3]
DISTRIBUTION = "gameday"
PACKAGES = ("labengine", "runner", "vllmfacts")
# what an installer writes into a .dist-info folder about this installation, not the package:
# a wheel made from the installed files leaves them out (its RECORD is written anew)
INSTALLER_FILES = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})
# a wheel's entries all carry this time, so the same files make the same wheel
ZIP_TIME = (1980, 1, 1, 0, 0, 0)

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


SourceFiles = Sequence[tuple[str, Path]]  # (its name in the checkout or the wheel, where it is)


def in_checkout(root: Path = ROOT) -> bool:
    """Whether gameday runs from its source checkout (pip can build its wheel from `root`)."""
    return (root / "pyproject.toml").is_file() and (root / "runner" / "__init__.py").is_file()


def checkout_files(root: Path = ROOT) -> list[tuple[str, Path]]:
    """The checkout's files that go into gameday's wheel: pyproject.toml and the packages'."""
    out = [("pyproject.toml", root / "pyproject.toml")]
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                out.append((str(f.relative_to(root)), f))
    return out


def installed_files(dist: importlib.metadata.Distribution) -> list[tuple[str, Path]]:
    """The installed distribution's files a wheel of it carries, by their path in the wheel: the
    packages' files and the .dist-info metadata (not the scripts pip writes, the compiled caches
    or what the installer recorded). LabError when its RECORD lists no package files (an
    editable install: build from its checkout)."""
    out: list[tuple[str, Path]] = []
    for f in dist.files or []:
        parts = PurePosixPath(str(f)).parts
        if not parts or ".." in parts or "__pycache__" in parts:
            continue
        if parts[0].endswith(".dist-info"):
            if len(parts) == 2 and parts[1] in INSTALLER_FILES:
                continue
        elif parts[0] not in PACKAGES:
            continue
        out.append((str(PurePosixPath(*parts)), Path(str(dist.locate_file(f)))))
    missing = [name for name, path in out if not path.is_file()]
    if missing:
        raise LabError(
            f"the installed gameday lacks {len(missing)} of its files ({', '.join(missing[:3])})",
            hint="reinstall gameday from its wheel (`pip install --force-reinstall gameday-*.whl`)",
        )
    if not any(name.startswith("runner/") for name, _ in out):
        raise LabError(
            "the installed gameday lists no package files to build the lab image from",
            hint="reinstall gameday from its wheel (`pip install gameday-*.whl`), or run "
            "`gameday lab build` from a clone of the gameday repository",
        )
    return sorted(out)


def inputs_hash(base_id: str, files: SourceFiles, dockerfile: Path = PACKAGED_DOCKERFILE) -> str:
    h = hashlib.sha256()
    h.update(dockerfile.read_bytes())
    h.update(base_id.encode())
    h.update(" ".join(requirements()).encode())
    for name, path in files:
        h.update(name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def current_inputs(client: Any, spec: ComposeSpec) -> str | None:
    """The inputs hash `build` would give the lab image now, from the base image on the machine
    (nothing is pulled), or None when it cannot be known here: no base image, or gameday neither
    in its checkout nor installed."""
    import docker

    for name in (spec.base_image, OFFLINE_BASE):
        try:
            base_id = client.images.get(name).id
            break
        except docker.errors.ImageNotFound:
            continue
    else:
        return None
    if in_checkout():
        return inputs_hash(base_id, checkout_files())
    try:
        return inputs_hash(base_id, installed_files(importlib.metadata.distribution(DISTRIBUTION)))
    except (importlib.metadata.PackageNotFoundError, LabError):
        return None


def check_current(client: Any, spec: ComposeSpec, inventory_path: Path) -> None:
    """LabError when the lab image was built by `build` from other inputs than this gameday's:
    it would run other code in the lab than the runner asserts against, and say nothing of it.
    An image without the inputs label (not built by gameday) is the user's to answer for."""
    built_from = (client.images.get(spec.image).labels or {}).get("gameday.inputs")
    now = current_inputs(client, spec) if built_from else None
    if built_from and now and built_from != now:
        raise LabError(
            f"the lab image {spec.image} was built from other sources than this gameday's "
            f"(its inputs {built_from}, these {now}): the lab would run other code",
            hint=f"gameday lab build --lab {inventory_path}",
        )


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_from_installed(dist: importlib.metadata.Distribution, dest: Path) -> Path:
    """A wheel of the installed distribution, packed from its installed files with a new RECORD,
    written into `dest`: what pip installs in the image, for a gameday with no sources here."""
    files = installed_files(dist)
    info = next(
        (n.split("/")[0] for n, _ in files if n.endswith(".dist-info/METADATA")),
        None,
    )
    if info is None:
        raise LabError(
            "the installed gameday has no METADATA to build the lab image's wheel from",
            hint="reinstall gameday from its wheel (`pip install gameday-*.whl`)",
        )
    wheel_meta = dist.read_text("WHEEL") or ""
    tags = [
        v.strip()
        for k, _, v in (x.partition(":") for x in wheel_meta.splitlines())
        if k.strip() == "Tag"
    ]
    tag = tags[0] if tags else "py3-none-any"
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{info.removesuffix('.dist-info')}-{tag}.whl"
    record: list[str] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, path in files:
            data = path.read_bytes()
            entry = zipfile.ZipInfo(name, ZIP_TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
            record.append(f"{name},{_record_hash(data)},{len(data)}")
        record.append(f"{info}/RECORD,,")
        entry = zipfile.ZipInfo(f"{info}/RECORD", ZIP_TIME)
        entry.external_attr = 0o644 << 16
        zf.writestr(entry, "\n".join(record) + "\n")
    return wheel


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


def _wheels(dest: Path, dist: importlib.metadata.Distribution | None) -> None:
    """The engine's requirements as wheels from the index, and gameday's: built from the
    checkout (`dist` None), else packed from the installed distribution."""
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(dest)]
    jobs = [requirements()]
    if dist is None:
        jobs.append(["--no-deps", str(ROOT)])
    else:
        wheel_from_installed(dist, dest)
    for args in filter(None, jobs):
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
    if not PACKAGED_DOCKERFILE.is_file():
        raise LabError(
            f"the lab image's Dockerfile is not in the package ({PACKAGED_DOCKERFILE})",
            hint="reinstall gameday from its wheel (`pip install gameday-*.whl`)",
        )
    dist: importlib.metadata.Distribution | None = None
    if in_checkout():
        files = checkout_files()
    else:
        try:
            dist = importlib.metadata.distribution(DISTRIBUTION)
        except importlib.metadata.PackageNotFoundError as exc:
            raise LabError(
                f"gameday runs neither from its checkout nor from an installed {DISTRIBUTION}",
                hint="pip install gameday's wheel, or run from a clone of the gameday repository",
            ) from exc
        files = installed_files(dist)
    client = docker_client()
    base = ensure_base(client, spec.base_image, progress)
    base_id = client.images.get(base).id
    digest = inputs_hash(base_id, files)
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
        _wheels(ctx / "wheels", dist)
        shutil.copy(PACKAGED_DOCKERFILE, ctx / "Dockerfile")
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
