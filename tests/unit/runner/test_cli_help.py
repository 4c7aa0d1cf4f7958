"""Every command's --help states its exit codes, every option has help text; -q/-v; results on
stdout, diagnostics on stderr; messages without pydantic's prefixes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pydantic
import pytest
from click.testing import CliRunner

from runner.cli import output
from runner.cli.main import main
from runner.errors import ScenarioError, plain_message
from runner.spec.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def normal_level() -> Iterator[None]:
    yield
    output.set_level(output.Level.NORMAL)


def commands(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, group
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def test_every_option_of_every_command_has_help() -> None:
    missing = [
        f"gameday {' '.join(path)} {'/'.join(p.opts)}"
        for path, cmd in commands(main)
        for p in cmd.params
        if isinstance(p, click.Option) and not (p.help or "").strip()
    ]
    assert missing == []


def test_the_walk_sees_a_missing_help() -> None:
    @click.group()
    def g() -> None: ...

    @g.command()
    @click.option("--json", is_flag=True)
    def c(json: bool) -> None: ...

    assert [[o.help for o in cmd.params] for _, cmd in commands(g) if cmd is c] == [[None]]


def test_every_help_states_exit_codes() -> None:
    runner = CliRunner()
    without = []
    for path, _ in commands(main):
        got = runner.invoke(main, [*path, "--help"])
        assert got.exit_code == 0, path
        if "Exit codes:\n    0    " not in got.stdout:
            without.append(path)
    assert without == []


def test_run_help_names_its_verdict_codes() -> None:
    got = CliRunner().invoke(main, ["run", "--help"])
    assert "    1    an assertion failed\n" in got.stdout
    assert "    130  interrupted by Ctrl-C\n" in got.stdout
    assert "    143  interrupted by SIGTERM (a CI job cancelled, `kill`)\n" in got.stdout


def test_cleanup_parallel_has_its_own_help() -> None:
    got = CliRunner().invoke(main, ["cleanup", "--help"], terminal_width=200)
    assert "The N of the `run --parallel N` that was interrupted" in got.stdout
    assert "Run the scenarios on N isolated instances" not in got.stdout


def test_validate_prints_ok_on_stdout_and_errors_on_stderr(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: gameday/v1\nkind: Scenario\nmetadata: 3\n")
    good = ROOT / "scenarios" / "tp-mismatch.yaml"
    got = CliRunner().invoke(main, ["validate", str(good), str(bad)])
    assert got.exit_code == 2
    assert got.stdout == f"ok  {good}\n"
    assert str(bad) in got.stderr and "ok  " not in got.stderr


def test_quiet_drops_diagnostics_and_verbose_adds_them(capsys: pytest.CaptureFixture[str]) -> None:
    output.set_level(output.Level.QUIET)
    output.message("a diagnostic")
    output.debug("a detail")
    assert capsys.readouterr().err == ""
    output.set_level(output.Level.VERBOSE)
    output.message("a diagnostic")
    output.debug("a detail")
    assert capsys.readouterr().err == "a diagnostic\na detail\n"
    output.set_level(output.Level.NORMAL)
    output.debug("a detail")
    assert capsys.readouterr().err == ""


def test_quiet_and_verbose_together_are_refused() -> None:
    got = CliRunner().invoke(main, ["-q", "-v", "list"])
    assert got.exit_code == 2
    assert "-q and -v exclude each other" in got.stderr


def test_quiet_cleanup_prints_nothing(tmp_path: Path) -> None:
    got = CliRunner().invoke(
        main,
        ["-q", "cleanup", "--lab", str(ROOT / "inventories" / "local.yaml")],
        env={"GAMEDAY_STATE_DIR": str(tmp_path)},
    )
    assert (got.exit_code, got.stdout, got.stderr) == (0, "", "")
    loud = CliRunner().invoke(
        main,
        ["cleanup", "--lab", str(ROOT / "inventories" / "local.yaml")],
        env={"GAMEDAY_STATE_DIR": str(tmp_path)},
    )
    assert loud.stderr == "lab 'local': nothing to undo\n"


class _M(pydantic.BaseModel):
    n: int

    @pydantic.field_validator("n")
    @classmethod
    def _odd(cls, v: int) -> int:
        if v % 2 == 0:
            raise ValueError("n must be odd")
        return v


def test_plain_message_drops_pydantic_prefix() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        _M(n=2)
    err = info.value.errors()[0]
    assert err["msg"] == "Value error, n must be odd"
    assert plain_message(err) == "n must be odd"
    assert plain_message({"type": "value_error", "msg": "Value error, bare"}) == "bare"


def test_a_scenario_error_has_no_library_prefix(tmp_path: Path) -> None:
    sc = tmp_path / "tp.yaml"
    text = (ROOT / "scenarios" / "tp-mismatch.yaml").read_text()
    sc.write_text(text.replace("time_to_fail: {max_s: 30}", "time_to_fail: {min_s: 40, max_s: 30}"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(sc)
    assert info.value.message == (
        f"{sc}:40 [expect.time_to_fail]: min_s (40.0) is larger than max_s (30.0)"
    )
