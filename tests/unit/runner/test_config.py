"""runner.spec.config: where the configuration file is found, what it says, what overrides it, and
how a mistake in it is reported (file, line, field)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import InputError
from runner.spec.config import builtin_lab, load_config
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_found_by_walking_up_and_paths_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "team" / "chaos").mkdir(parents=True)
    cfg_file = write(
        tmp_path / "team" / "gameday.toml",
        'scenarios = ["chaos"]\nlab = "labs/ci.yaml"\nreports = "out"\n',
    )
    deep = tmp_path / "team" / "src" / "pkg"
    deep.mkdir(parents=True)
    cfg = load_config(deep, {})
    assert cfg.file == cfg_file
    assert cfg.scenarios == (tmp_path / "team" / "chaos",)
    assert cfg.lab == tmp_path / "team" / "labs" / "ci.yaml"
    assert cfg.reports == tmp_path / "team" / "out"


def test_pyproject_without_the_table_does_not_stop_the_walk(tmp_path: Path) -> None:
    write(tmp_path / "gameday.toml", 'lab = "top.yaml"\n')
    write(tmp_path / "sub" / "pyproject.toml", '[project]\nname = "x"\n')
    cfg = load_config(tmp_path / "sub", {})
    assert cfg.file == tmp_path / "gameday.toml"
    assert cfg.lab == tmp_path / "top.yaml"


def test_pyproject_with_the_table_wins_over_a_file_further_up(tmp_path: Path) -> None:
    write(tmp_path / "gameday.toml", 'lab = "top.yaml"\n')
    py = write(tmp_path / "sub" / "pyproject.toml", '[tool.gameday]\nlab = "inner.yaml"\n')
    cfg = load_config(tmp_path / "sub", {})
    assert cfg.file == py
    assert cfg.lab == tmp_path / "sub" / "inner.yaml"
    assert cfg.scenarios == ()
    assert cfg.reports == tmp_path / "sub" / "reports"


def test_gameday_toml_first_in_one_folder(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.gameday]\nlab = "py.yaml"\n')
    write(tmp_path / "gameday.toml", 'lab = "own.yaml"\n')
    assert load_config(tmp_path, {}).lab == tmp_path / "own.yaml"


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    write(tmp_path / "gameday.toml", 'lab = "file.yaml"\nreports = "file-reports"\n')
    env = {"GAMEDAY_LAB": "env.yaml", "GAMEDAY_REPORTS": "/abs/reports"}
    cfg = load_config(tmp_path, env)
    assert cfg.lab == tmp_path / "env.yaml"
    assert cfg.reports == Path("/abs/reports")


def test_without_a_file_the_checkout_layout(tmp_path: Path) -> None:
    write(tmp_path / "inventories" / "local.yaml", "all: {}\n")
    cfg = load_config(tmp_path, {})
    assert (cfg.file, cfg.scenarios, cfg.builtin) == (None, (), True)
    assert cfg.lab == tmp_path / "inventories" / "local.yaml"
    assert cfg.reports == tmp_path / "reports"
    (tmp_path / "scenarios").mkdir()
    assert load_config(tmp_path, {}).scenarios == (tmp_path / "scenarios",)


def test_a_new_folder_gets_the_local_lab_that_ships_with_the_package(tmp_path: Path) -> None:
    assert load_config(tmp_path, {}).lab == builtin_lab()
    write(tmp_path / "gameday.toml", 'reports = "r"\n')
    assert load_config(tmp_path, {}).lab == builtin_lab()
    # one source: the package's copy is the repository's inventories/local.yaml
    assert builtin_lab().read_bytes() == (ROOT / "inventories" / "local.yaml").read_bytes()
    lab = load_inventory(builtin_lab())
    assert (lab.lab.name, lab.lab.kind.value) == ("local", "local")


def test_builtin_false_leaves_the_catalogue_out(tmp_path: Path) -> None:
    write(tmp_path / "gameday.toml", "builtin = false\n")
    assert load_config(tmp_path, {}).builtin is False
    write(tmp_path / "gameday.toml", "builtin = true\n")
    assert load_config(tmp_path, {}).builtin is True
    write(tmp_path / "gameday.toml", "[tool.gameday]\nbuiltin = false\n")
    (tmp_path / "gameday.toml").rename(tmp_path / "pyproject.toml")
    assert load_config(tmp_path, {}).builtin is False


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ('lab = "a.yaml"\n\nscenario = ["x"]\n', 3, "scenario", "unknown key"),
        ('reports = "r"\nlab = 3\n', 2, "lab", "Input should be a valid string"),
        ('scenarios = "chaos"\n', 1, "scenarios", "Input should be a valid list"),
        ('scenarios = ["missing"]\n', 1, "scenarios", "scenario folder"),
        ('lab = "a.yaml"\nbuiltin = "no"\n', 2, "builtin", "Input should be a valid boolean"),
    ],
)
def test_errors_name_file_line_and_field(
    tmp_path: Path, text: str, line: int, field: str, message: str
) -> None:
    f = write(tmp_path / "gameday.toml", text)
    with pytest.raises(InputError) as exc:
        load_config(tmp_path, {})
    assert (exc.value.file, exc.value.line, exc.value.field) == (str(f), line, field)
    assert exc.value.exit_code == 2
    assert message in exc.value.message


def test_error_in_pyproject_table_names_its_line_and_dotted_field(tmp_path: Path) -> None:
    f = write(
        tmp_path / "pyproject.toml",
        '[project]\nlab = "not ours"\n\n[tool.gameday]\nreports = "r"\nlab = ["a"]\n',
    )
    with pytest.raises(InputError) as exc:
        load_config(tmp_path, {})
    assert (exc.value.file, exc.value.line, exc.value.field) == (str(f), 6, "tool.gameday.lab")


def test_invalid_toml_names_its_line(tmp_path: Path) -> None:
    f = write(tmp_path / "gameday.toml", 'lab = "a.yaml"\nreports = \n')
    with pytest.raises(InputError) as exc:
        load_config(tmp_path, {})
    assert (exc.value.file, exc.value.line) == (str(f), 2)
    assert exc.value.message.startswith(f"{f}:2: not valid TOML: ")
