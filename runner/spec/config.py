"""Where a team keeps its scenarios, its lab and its reports: `gameday.toml`, or `[tool.gameday]`
in a `pyproject.toml`, found by walking up from the current folder.

The first folder that has a `gameday.toml`, or a `pyproject.toml` with a `[tool.gameday]` table,
wins (a `pyproject.toml` without the table does not stop the walk; in one folder `gameday.toml`
comes first). The walk ends at the repository's root (`.git`) or the home folder, and a file of
another user's, or one others can write, is refused (see `find_config`). Paths in the file are
relative to the file's folder. The environment (`GAMEDAY_LAB`, `GAMEDAY_REPORTS`, relative to the
current folder) overrides the file, and the command line overrides both (the CLI applies its own
options).

    # gameday.toml                     # pyproject.toml
    scenarios = ["chaos/scenarios"]    [tool.gameday]
    lab = "chaos/lab.yaml"             scenarios = ["chaos/scenarios"]
    reports = "chaos/reports"          builtin = false
    builtin = false                    # no built-in scenarios in a default run

`lab` left out: `inventories/local.yaml` beside the file (or in the current folder, without a file)
when it exists, else the local lab that ships inside the package, so that a new repository runs
the catalogue without a file of its own. `builtin = false` leaves the built-in catalogue out of
the default set (a command given no scenarios); an id from it named on the command line still
resolves.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr

from runner.errors import InputError, plain_message
from runner.fsutil import check_trusted, read_bytes

CONFIG_NAME = "gameday.toml"
PYPROJECT = "pyproject.toml"
MAX_BYTES = 1_000_000
HINT = (
    'keys: scenarios = ["folder", ...], lab = "inventory", reports = "folder", '
    "builtin = true|false (docs/commands.md 'Using gameday in your repository')"
)

# Without a configuration file: the layout of gameday's own checkout.
DEFAULT_SCENARIOS = Path("scenarios")
DEFAULT_LAB = Path("inventories/local.yaml")
DEFAULT_REPORTS = Path("reports")


class _File(BaseModel):
    """The keys a configuration file may hold (strict: a number is not a path)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    scenarios: list[StrictStr] | None = None
    lab: StrictStr | None = None
    reports: StrictStr | None = None
    builtin: StrictBool | None = None


@dataclass(frozen=True)
class Config:
    """Where things are. `file`: the configuration file (None: none found). `scenarios`: the
    team's own folders (the built-in catalogue comes after them, unless `builtin` is False)."""

    file: Path | None
    scenarios: tuple[Path, ...]
    lab: Path
    reports: Path
    builtin: bool = True


def builtin_lab() -> Path:
    """The local lab that ships inside the package: runner/builtin_labs (in a checkout, a link to
    inventories/) holds its inventory, and everything it names (the lab engine, the model
    configurations, the alert rules) is in the package too."""
    return Path(str(files("runner") / "builtin_labs" / "local.yaml"))


def default_lab(base: Path) -> Path:
    """The lab when none is named: `base`'s inventories/local.yaml (gameday's own checkout, or a
    team that keeps its lab there), else the packaged one."""
    own = base / DEFAULT_LAB
    return own if own.is_file() else builtin_lab()


def find_config(start: Path) -> tuple[Path, tuple[str, ...]] | None:
    """The configuration file that applies in `start`, with the table path that holds gameday's
    keys in it (`()` for gameday.toml, `("tool", "gameday")` for pyproject.toml).

    The walk ends at the repository's root (a folder with `.git`) or at the home folder, as
    git's own discovery would: a file above them is none of the repository's (a planted
    /tmp/gameday.toml, a shared parent folder). A file found that another user owns or can
    write is refused (runner.fsutil.check_trusted), never skipped: the user learns of it."""
    home = _home()
    for folder in (start, *start.parents):
        own = folder / CONFIG_NAME
        if own.is_file():
            _trusted(own)
            return own, ()
        py = folder / PYPROJECT
        if py.is_file() and "gameday" in _parse(py).get("tool", {}):
            _trusted(py)
            return py, ("tool", "gameday")
        if (folder / ".git").exists() or (home is not None and folder.resolve() == home):
            break
    return None


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, KeyError, OSError):  # no HOME and no password entry
        return None


def _trusted(path: Path) -> None:
    try:
        st = path.stat()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=path) from None
    check_trusted(path, st, InputError, "configuration")


def load_config(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """The configuration for a command run in `cwd` (default: the current folder), with the
    environment's overrides."""
    cwd = (cwd or Path.cwd()).absolute()
    env = os.environ if environ is None else environ
    found = find_config(cwd)
    if found is None:
        team = (DEFAULT_SCENARIOS,) if (cwd / DEFAULT_SCENARIOS).is_dir() else ()
        cfg = Config(None, tuple(cwd / p for p in team), default_lab(cwd), cwd / DEFAULT_REPORTS)
    else:
        cfg = _from_file(*found)
    lab, reports = env.get("GAMEDAY_LAB"), env.get("GAMEDAY_REPORTS")
    return Config(
        file=cfg.file,
        scenarios=cfg.scenarios,
        lab=cwd / lab if lab else cfg.lab,
        reports=cwd / reports if reports else cfg.reports,
        builtin=cfg.builtin,
    )


def _from_file(path: Path, table: tuple[str, ...]) -> Config:
    # read through the descriptor that is checked: a file swapped in after find_config's check
    # is refused, not read
    data: Any = _parse(path, trusted=True)
    for key in table:
        data = data[key]
    if not isinstance(data, dict):
        raise InputError(
            f"[{'.'.join(table)}] must be a table", file=path, line=_line(path, table, None)
        )
    try:
        f = _File.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0])
        msg = "unknown key" if err["type"] == "extra_forbidden" else plain_message(err)
        field = ".".join((*table, *map(str, err["loc"])))
        raise InputError(
            msg, file=path, line=_line(path, table, key), field=field, hint=HINT
        ) from None
    base = path.parent
    folders = tuple(base / p for p in f.scenarios or [])
    for p in folders:
        if not p.is_dir():
            raise InputError(
                f"scenario folder {str(p)!r} does not exist",
                file=path,
                line=_line(path, table, "scenarios"),
                field=".".join((*table, "scenarios")),
                hint="paths are relative to the configuration file's folder",
            )
    return Config(
        file=path,
        scenarios=folders,
        lab=base / f.lab if f.lab else default_lab(base),
        reports=base / f.reports if f.reports else base / DEFAULT_REPORTS,
        builtin=f.builtin is not False,
    )


def _parse(path: Path, *, trusted: bool = False) -> dict[str, Any]:
    raw = read_bytes(path, MAX_BYTES, InputError, "configuration", trusted=trusted)
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", file=path) from None
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+)", str(exc))
        raise InputError(
            f"not valid TOML: {exc}", file=path, line=int(m.group(1)) if m else None
        ) from None


_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")


def _line(path: Path, table: tuple[str, ...], key: str | None) -> int | None:
    """The line that sets `key` in `table` (None: the table's header), found in the text:
    tomllib does not keep positions."""
    current: tuple[str, ...] = ()
    k = re.escape(key or "")
    wanted = re.compile(rf"^\s*(\"{k}\"|'{k}'|{k})\s*=")
    for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if m := _HEADER.match(text):
            current = tuple(p.strip().strip("\"'") for p in m.group(1).split("."))
            if key is None and current == table:
                return n
        elif key is not None and current == table and wanted.match(text):
            return n
    return None
