"""A gameday distribution installed in a folder as pip leaves one (its files, and a RECORD of them
with what the installation adds), standing for an installed gameday with no sources."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

INFO = "gameday-9.9.1.dist-info"
PACKAGE = {
    "runner/__init__.py": "",
    "runner/labs/compose/data/Dockerfile": "FROM scratch\n",
    "runner/builtin_labs/local.yaml": "all: {}\n",
    "labengine/__init__.py": "",
    "labengine/cli.py": "def main() -> None: ...\n",
    "vllmfacts/__init__.py": "",
    f"{INFO}/METADATA": "Metadata-Version: 2.1\nName: gameday\nVersion: 9.9.1\n",
    f"{INFO}/WHEEL": "Wheel-Version: 1.0\nGenerator: setuptools\nRoot-Is-Purelib: true\n"
    "Tag: py3-none-any\n",
    f"{INFO}/entry_points.txt": "[console_scripts]\nvllm-lab = labengine.cli:main\n",
    f"{INFO}/top_level.txt": "labengine\nrunner\nvllmfacts\n",
}
# what an installation adds that is not the package
INSTALLED = {
    "runner/__pycache__/__init__.cpython-311.pyc": "compiled",
    f"{INFO}/INSTALLER": "pip\n",
    f"{INFO}/REQUESTED": "",
    f"{INFO}/direct_url.json": '{"url": "file:///tmp/gameday-9.9.1-py3-none-any.whl"}\n',
    "__editable___gameday_finder.py": "",
    "../../../bin/vllm-lab": "#!/usr/bin/python\n",
}


def fake_install(site: Path, package: dict[str, str] = PACKAGE) -> importlib.metadata.Distribution:
    """A distribution installed in `site` as pip leaves one: its files and a RECORD of them."""
    site.mkdir(parents=True, exist_ok=True)
    for name, text in {**package, **INSTALLED}.items():
        path = (site / name).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    record = [f"{name},," for name in {**package, **INSTALLED}] + [f"{INFO}/RECORD,,"]
    (site / INFO / "RECORD").write_text("\n".join(record) + "\n")
    return importlib.metadata.PathDistribution(site / INFO)
