"""reports/latest, a run named by id, `latest` or path, and `run --junit/--json/--html PATH`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runner.cli.main import main
from runner.errors import InputError
from runner.report import write_reports
from runner.results.rundirs import LATEST, find_run, link_latest, run_dirs
from tests.support.results import run_result, scenario_result
from tests.unit.runner.test_hostile_input import ROOT, _IdleLab


def make_run(root: Path, run_id: str) -> Path:
    write_reports(run_result(scenario_result("x"), run_id=run_id), root / run_id)
    link_latest(root, root / run_id)
    return root / run_id


def test_latest_is_a_relative_symlink_to_the_newest_run(tmp_path: Path) -> None:
    make_run(tmp_path, "20260101T000000Z-aaaaaa")
    make_run(tmp_path, "20260102T000000Z-bbbbbb")
    assert os.readlink(tmp_path / LATEST) == "20260102T000000Z-bbbbbb"
    assert [p.name for p in run_dirs(tmp_path)] == [
        "20260101T000000Z-aaaaaa",
        "20260102T000000Z-bbbbbb",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "20260101T000000Z-aaaaaa",
        "20260102T000000Z-bbbbbb",
        LATEST,
    ]  # no temporary pointer left


def test_latest_is_a_file_where_symlinks_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Path, target: Any, target_is_directory: bool = False) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(Path, "symlink_to", refuse)
    make_run(tmp_path, "20260101T000000Z-aaaaaa")
    make_run(tmp_path, "20260101T000000Z-cccccc")
    assert (tmp_path / LATEST).read_text() == "20260101T000000Z-cccccc\n"
    # the pointer file wins over the sort order (it names the run written last)
    (tmp_path / LATEST).write_text("20260101T000000Z-aaaaaa\n")
    assert find_run(None, tmp_path) == tmp_path / "20260101T000000Z-aaaaaa" / "result.json"


def test_find_run_by_id_latest_and_path(tmp_path: Path) -> None:
    a = make_run(tmp_path, "20260101T000000Z-aaaaaa")
    b = make_run(tmp_path, "20260102T000000Z-bbbbbb")
    assert find_run("20260101T000000Z-aaaaaa", tmp_path) == a / "result.json"
    assert (
        find_run("latest", tmp_path) == tmp_path / LATEST / "result.json"
        or find_run("latest", tmp_path) == b / "result.json"
    )
    assert find_run(str(a), tmp_path) == a / "result.json"
    assert find_run(str(a / "result.json"), tmp_path) == a / "result.json"
    with pytest.raises(InputError) as info:
        find_run("nope", tmp_path)
    assert info.value.message == f"{tmp_path}: no such run: 'nope'"


def test_report_command_takes_a_run_id(tmp_path: Path) -> None:
    make_run(tmp_path, "20260101T000000Z-aaaaaa")
    make_run(tmp_path, "20260102T000000Z-bbbbbb")
    got = CliRunner().invoke(
        main, ["report", "20260101T000000Z-aaaaaa", "--reports", str(tmp_path)]
    )
    assert got.exit_code == 1, got.output  # the run failed
    assert f"reports: {tmp_path}/20260101T000000Z-aaaaaa/" in got.stdout
    latest = CliRunner().invoke(main, ["report", "--reports", str(tmp_path)])
    assert "20260102T000000Z-bbbbbb" in latest.stdout
    missing = CliRunner().invoke(main, ["report", "20991231", "--reports", str(tmp_path)])
    assert missing.exit_code == 2
    assert "no such run: '20991231'" in missing.stderr and "Traceback" not in missing.output


def idle_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> Any:
    import runner.run.suite

    def run_scenario(ls: Any, lab: Any, journal: Any, progress: Any) -> Any:
        return runner.run.suite.skipped(ls, lab)

    monkeypatch.setattr(runner.run.suite, "run_scenario", run_scenario)
    monkeypatch.setattr(runner.run.suite, "open_lab", lambda inv: _IdleLab(inv, tmp_path / "state"))
    sc = str(ROOT / "scenarios" / "tp-mismatch.yaml")
    return CliRunner().invoke(main, ["run", sc, "--reports", str(tmp_path / "reports"), *args])


def test_run_writes_copies_where_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "ci" / "deep"
    got = idle_run(
        monkeypatch,
        tmp_path,
        "--junit",
        str(out / "junit.xml"),
        "--json",
        str(out / "r.json"),
        "--html",
        str(out / "page.html"),
    )
    assert got.exit_code == 0, got.output
    run = (tmp_path / "reports" / LATEST).resolve()
    assert (out / "junit.xml").read_text() == (run / "junit.xml").read_text()
    assert (out / "page.html").read_text() == (run / "report.html").read_text()
    assert json.loads((out / "r.json").read_text())["run_id"] == run.name
    assert got.stdout.endswith("verdict: skipped\n")  # a --json PATH still prints the table


def test_bare_json_still_prints_result_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = idle_run(monkeypatch, tmp_path, "--json")
    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout)["scenarios"][0]["id"] == "tp-mismatch"


def test_a_scenario_after_bare_json_is_run_not_written_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gameday run --json kv-cache-shortage`: click gives the id to --json as its PATH."""
    got = idle_run(monkeypatch, tmp_path, "--json", "kv-cache-shortage")
    assert got.exit_code == 0, got.output
    ids = [s["id"] for s in json.loads(got.stdout)["scenarios"]]
    assert ids == ["kv-cache-shortage", "tp-mismatch"]  # the one after --json first
    assert not (tmp_path / "kv-cache-shortage").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--json", "no-such-scenario"],
            "--json no-such-scenario: neither a .json file to write nor a scenario",
        ),
        (["--json", "/dev/stdout"], "--json /dev/stdout: neither a .json file to write nor a"),
        (
            ["--junit", "{tmp}/afile/junit.xml"],
            "{tmp}/afile/junit.xml: {tmp}/afile is not a folder",
        ),
        (["--html", "{tmp}"], "Invalid value for '--html': File '{tmp}' is a directory."),
    ],
)
def test_a_bad_output_path_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    (tmp_path / "afile").write_text("")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    got = idle_run(monkeypatch, tmp_path, *args)
    assert got.exit_code == 2
    assert message.replace("{tmp}", str(tmp_path)) in got.stderr
    assert not (tmp_path / "reports").exists()  # nothing ran, nothing was written


def test_report_refuses_a_run_folder_it_cannot_write(tmp_path: Path) -> None:
    run = make_run(tmp_path, "20260101T000000Z-aaaaaa")
    before = (run / "result.json").read_bytes()
    (run / "junit.xml").unlink()
    (run / "junit.xml").mkdir()
    got = CliRunner().invoke(main, ["report", str(run)])
    assert got.exit_code == 2, got.output
    assert got.stderr == (
        f"error: {run}/junit.xml: cannot write the report: Is a directory\n"
        "  hint: make the run folder's files writable (a folder in a file's place is not)\n"
    )
    assert (run / "result.json").read_bytes() == before
    assert sorted(p.name for p in run.iterdir()) == [
        "junit.xml",
        "report.html",
        "report.md",
        "result.json",
    ]  # no temporary file left


def test_reports_are_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    run = make_run(tmp_path, "20260101T000000Z-aaaaaa")
    (run / "report.html").unlink()
    (run / "report.html").mkdir()
    with pytest.raises(InputError) as info:
        write_reports(run_result(scenario_result("y"), run_id="other"), run)
    assert info.value.message == f"{run}/report.html: cannot write the report: Is a directory"
    assert json.loads((run / "result.json").read_text())["run_id"] == "20260101T000000Z-aaaaaa"
    (run / "report.html").rmdir()
    write_reports(run_result(scenario_result("y"), run_id="other"), run)
    assert json.loads((run / "result.json").read_text())["run_id"] == "other"
    assert oct((run / "report.md").stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_copy_onto_the_runs_own_file_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    latest = tmp_path / "reports" / LATEST
    for _ in range(2):  # latest not there yet, then latest naming the run before
        got = idle_run(monkeypatch, tmp_path, "--junit", str(latest / "junit.xml"))
        assert got.exit_code == 0, got.output
        assert [ln.split("s ", 1)[1] for ln in got.stderr.splitlines()] == [
            "[tp-mismatch] starting",
            "[tp-mismatch] skipped",
        ]  # progress only: no error
        assert got.stdout.endswith("verdict: skipped\n")
    runs = run_dirs(tmp_path / "reports")
    assert len(runs) == 2
    assert latest.resolve() in [r.resolve() for r in runs]
    assert [(r / "junit.xml").is_file() for r in runs] == [True, True]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--json", "out.json"], "--json PATH.json"),
        (["--junit", "j.xml", "--html", "p.html"], "--junit, --html"),
    ],
)
def test_a_dry_run_refuses_report_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], named: str
) -> None:
    got = idle_run(monkeypatch, tmp_path, "--dry-run", *args)
    assert got.exit_code == 2, got.output
    assert got.stderr == (
        f"error: --dry-run writes no reports: {named} would have nothing to copy\n"
        "  hint: drop them for a dry run (`--json` alone prints the plans as JSON)\n"
    )
    assert got.stdout == ""


def test_run_json_help_says_a_path_keeps_the_table() -> None:
    got = CliRunner().invoke(main, ["run", "--help"], terminal_width=400)
    assert (
        "Alone: print result.json to stdout instead of the table. With PATH.json: write a copy "
        "of result.json there (parent folders made) and print the table as usual. With "
        "--dry-run (no PATH): the plans as JSON." in " ".join(got.stdout.split())
    )
