"""The compose lab image's inputs when gameday is installed (no sources): the installed
distribution's files decide the image's tag, and are packed back into a wheel pip installs in the
image (tests/integration/runner/test_image_wheel.py installs one). A fake distribution in tmp
stands for the installed one."""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path
from typing import Any

import docker
import pytest

from runner.errors import LabError
from runner.labs.compose import build as image
from runner.labs.compose.project import (
    PACKAGED_COMPOSE_FILE,
    PACKAGED_DOCKERFILE,
    PACKAGED_PLAYBOOKS,
    compose_file,
    playbooks_dir,
)
from runner.spec.inventory import ComposeSpec
from runner.spec.inventory_load import load_inventory
from tests.support.fakedist import INFO, PACKAGE, fake_install

ROOT = Path(__file__).resolve().parents[4]


def test_a_wheel_carries_the_packages_and_metadata_not_the_installation(tmp_path: Path) -> None:
    dist = fake_install(tmp_path / "venv" / "lib" / "site")
    names = [name for name, _ in image.installed_files(dist)]
    assert names == sorted(PACKAGE)


def test_the_tag_follows_the_installed_files_and_version(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = fake_install(site)

    def tag() -> str:
        return image.inputs_hash("sha256:base", image.installed_files(dist), PACKAGED_DOCKERFILE)

    first = tag()
    assert tag() == first
    # what the installation adds does not change the image
    (site / "runner" / "__pycache__" / "__init__.cpython-311.pyc").write_text("recompiled")
    (site / INFO / "INSTALLER").write_text("uv\n")
    assert tag() == first
    # the package's files and its version do
    (site / "labengine" / "cli.py").write_text("def main() -> None: print()\n")
    second = tag()
    assert second != first
    (site / INFO / "METADATA").write_text(PACKAGE[f"{INFO}/METADATA"].replace("9.9.1", "9.9.2"))
    assert tag() != second
    assert image.inputs_hash("sha256:other", image.installed_files(dist)) != tag()


def test_the_packed_wheel_is_one_pip_installs_offline(tmp_path: Path) -> None:
    dist = fake_install(tmp_path / "site")
    wheel = image.wheel_from_installed(dist, tmp_path / "wheels")
    assert wheel.name == "gameday-9.9.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        assert sorted(zf.namelist()) == sorted([*PACKAGE, f"{INFO}/RECORD"])
        record = zf.read(f"{INFO}/RECORD").decode().splitlines()
        for line in record[:-1]:
            name, digest, size = line.split(",")
            data = zf.read(name)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={want}", len(data)), name
    # the same files make the same wheel (the image's layer does not change for nothing)
    again = image.wheel_from_installed(dist, tmp_path / "again")
    assert again.read_bytes() == wheel.read_bytes()


def test_an_editable_or_broken_install_is_refused_with_what_to_do(tmp_path: Path) -> None:
    editable = fake_install(tmp_path / "editable", {k: v for k, v in PACKAGE.items() if "/" in k})
    for name in list(PACKAGE):
        if not name.startswith(INFO):
            (tmp_path / "editable" / name).unlink()
    record = (tmp_path / "editable" / INFO / "RECORD").read_text().splitlines()
    (tmp_path / "editable" / INFO / "RECORD").write_text(
        "\n".join(r for r in record if r.startswith((INFO, "__editable__"))) + "\n"
    )
    with pytest.raises(LabError, match="lists no package files"):
        image.installed_files(editable)
    broken = fake_install(tmp_path / "broken")
    (tmp_path / "broken" / "labengine" / "cli.py").unlink()
    with pytest.raises(LabError, match=r"lacks 1 of its files \(labengine/cli.py\)") as err:
        image.installed_files(broken)
    assert "--force-reinstall" in (err.value.hint or "")


def test_this_checkout_builds_from_its_sources() -> None:
    assert image.in_checkout(ROOT)
    names = [name for name, _ in image.checkout_files(ROOT)]
    assert names[0] == "pyproject.toml"
    assert "runner/labs/compose/build.py" in names
    assert not any("__pycache__" in n for n in names)


class FakeImages:
    """The docker SDK's images API as build() uses it: a base, no cached tag, a build whose
    context is kept for the test to read."""

    def __init__(self) -> None:
        self.context: dict[str, bytes] = {}
        self.buildargs: dict[str, str] = {}
        self.tagged: list[str] = []

    def get(self, name: str) -> Any:
        if name == "base:1":
            return type("Image", (), {"id": "sha256:base"})()
        raise docker.errors.ImageNotFound(name)

    def build(self, *, path: str, buildargs: dict[str, str], **_: Any) -> tuple[Any, list[Any]]:
        ctx = Path(path)
        self.context = {
            str(f.relative_to(ctx)): f.read_bytes() for f in ctx.rglob("*") if f.is_file()
        }
        self.buildargs = buildargs
        tagged = self.tagged
        return type("Image", (), {"tag": lambda _self, name: tagged.append(name)})(), []


def test_build_from_an_installed_package_assembles_its_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = fake_install(tmp_path / "site")
    images = FakeImages()
    client = type("Client", (), {"images": images})()
    monkeypatch.setattr(image, "in_checkout", lambda: False)
    monkeypatch.setattr(image.importlib.metadata, "distribution", lambda name: dist)
    monkeypatch.setattr(image, "docker_client", lambda: client)
    monkeypatch.setattr(image, "ensure_base", lambda client, base, progress: "base:1")
    monkeypatch.setattr(image, "requirements", list)  # no engine wheels from an index here
    said: list[str] = []
    result = image.build(ComposeSpec(image="team-lab:latest"), said.append)
    assert result.built
    want = image.inputs_hash("sha256:base", image.installed_files(dist))
    assert result.tag == f"team-lab:{want}"
    assert sorted(images.context) == ["Dockerfile", "wheels/gameday-9.9.1-py3-none-any.whl"]
    assert images.context["Dockerfile"] == PACKAGED_DOCKERFILE.read_bytes()
    assert images.buildargs["BASE_IMAGE"] == "base:1"
    assert images.tagged == ["team-lab:latest"]


def test_a_compose_inventory_that_names_no_file_uses_the_packaged_ones(tmp_path: Path) -> None:
    team = tmp_path / "team"
    team.mkdir()
    text = (ROOT / "inventories" / "compose.yaml").read_text()
    assert "file:" not in text and "playbooks:" not in text
    (team / "lab.yaml").write_text(text)
    inv = load_inventory(team / "lab.yaml")
    spec = inv.lab.compose
    assert spec is not None
    assert compose_file(inv, spec) == PACKAGED_COMPOSE_FILE.resolve()
    assert playbooks_dir(inv, spec) == PACKAGED_PLAYBOOKS.resolve()
    assert (playbooks_dir(inv, spec) / "process.yaml").is_file()
    # in this checkout the packaged ones are compose/ and playbooks/ themselves
    assert PACKAGED_COMPOSE_FILE.resolve() == ROOT / "compose" / "compose.yaml"
    assert PACKAGED_DOCKERFILE.resolve() == ROOT / "compose" / "Dockerfile"
    # an inventory that names its own keeps them, relative to itself
    own = spec.model_copy(update={"file": "c/compose.yaml", "playbooks": "pb"})
    assert compose_file(inv, own) == team / "c" / "compose.yaml"
    assert playbooks_dir(inv, own) == team / "pb"


def test_the_image_carries_every_package_the_lab_engine_imports() -> None:
    """The image installs the engine's requirements and gameday's wheel with --no-deps: any
    other distribution labengine/ or the vllmfacts/ it reads imports is missing there, and every
    engine container dies at its first import."""
    import ast
    import importlib.metadata
    import sys

    own = set(image.PACKAGES)
    dists = importlib.metadata.packages_distributions()
    needed: set[str] = set()
    for pkg in ("labengine", "vllmfacts"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module]
                    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    else []
                )
                for name in names:
                    top = name.split(".")[0]
                    if top in own or top in sys.stdlib_module_names or top == "__future__":
                        continue
                    needed |= {_canonical(d) for d in dists.get(top, [top])}
    assert needed <= {_canonical(r) for r in image.ENGINE_REQUIREMENTS}, needed


def _canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()
