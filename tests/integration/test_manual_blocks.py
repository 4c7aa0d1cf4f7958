"""The manual's blocks are tests that can fail: a copy of a page with a wrong command (a
misspelt subcommand), a wrong output or a skip without a reason fails, naming the page and the
line; a skip is reported with its page, line and reason (tests/support/docs.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.docs import (
    check_command,
    console_steps,
    gameday_calls,
    may_start_a_lab,
    output_matches,
    synopsis_commands,
)

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ROOT / "docs" / "commands.md"
CONFTEST = "from pathlib import Path\n\nfrom tests.support.docs import manual_hooks\n\n" + (
    "pytest_collect_file, pytest_runtest_makereport = manual_hooks(Path(__file__).parent)\n"
)


def _manual(tmp_path: Path, pages: dict[str, str]) -> Path:
    """A checkout-like folder of its own: the given pages under docs/, Sybil through this
    project's hooks."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    docs: the manual\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name, text in pages.items():
        page = tmp_path / "docs" / name
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text)
    return tmp_path


def _pytest(
    folder: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = os.environ | {"PYTHONPATH": path} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _block(text: str, needle: str) -> str:
    """The node id of the ```sh block holding `needle`, in docs/commands.md."""
    lines = text.splitlines()
    at = _line_of(text, needle)
    fence = max(i for i in range(1, at) if lines[i - 1].strip() == "```sh")
    return f"docs/commands.md::line:{fence},column:1"


def _misspelt(old: str, new: str) -> tuple[str, int]:
    text = COMMANDS.read_text()
    assert text.count(old) == 1, old
    text = text.replace(old, new)
    return text, _line_of(text, new)


def test_a_misspelt_subcommand_in_a_block_that_runs_fails_at_its_page_and_line(
    tmp_path: Path,
) -> None:
    # the team repository's block: it stops at `gameday lsit`, before any lab starts
    text, line = _misspelt(
        "gameday list                       #", "gameday lsit                       #"
    )
    p = _pytest(_manual(tmp_path, {"commands.md": text}), _block(text, "gameday lsit"))
    assert p.returncode == 1, p.stdout
    assert f"docs/commands.md:{line}: the block exited 2" in p.stdout, p.stdout
    assert "No such command 'lsit'" in p.stdout


def test_a_misspelt_subcommand_in_a_synopsis_fails_at_its_page_and_line(tmp_path: Path) -> None:
    text, line = _misspelt("gameday lab ps [--json]", "gameday lab sp [--json]")
    p = _pytest(_manual(tmp_path, {"commands.md": text}), _block(text, "gameday lab sp"))
    assert p.returncode == 1, p.stdout
    assert f"docs/commands.md:{line}: `gameday lab sp`: Error: No such command 'sp'" in p.stdout


def test_a_synopsis_flag_the_command_does_not_have_fails(tmp_path: Path) -> None:
    text, line = _misspelt("[--fail-fast]", "[--fail-fats]")
    p = _pytest(_manual(tmp_path, {"commands.md": text}), _block(text, "--fail-fats"))
    assert p.returncode == 1, p.stdout
    assert f"docs/commands.md:{line}: `gameday run` has no option --fail-fats" in p.stdout


def test_the_page_as_it_is_passes(tmp_path: Path) -> None:
    # its synopses, not the team block (that one starts a lab: the manual's own test runs it)
    text = COMMANDS.read_text()
    blocks = [_block(text, "gameday run [SCENARIO...]"), _block(text, "gameday lab ps [--json]")]
    p = _pytest(_manual(tmp_path, {"commands.md": text}), *blocks)
    assert p.returncode == 0, p.stdout
    assert "2 passed" in p.stdout


CONSOLE = """# A page

```console
$ gameday validate scenarios/tp-mismatch.yaml \\
    scenarios/kv-cache-shortage.yaml
ok  ...tp-mismatch.yaml
ok  scenarios/kv-cache-shortage.yaml
```
"""


def test_a_console_block_is_checked_against_the_output_it_shows(tmp_path: Path) -> None:
    folder = _manual(tmp_path, {"right.md": CONSOLE, "wrong.md": CONSOLE.replace("kv-cache", "xx")})
    p = _pytest(folder)
    assert "1 failed, 1 passed" in p.stdout, p.stdout
    # the wrong page's command, at its line: its output is not what the page shows
    assert "docs/wrong.md:4: `gameday validate scenarios/tp-mismatch.yaml" in p.stdout


def test_a_skip_is_reported_with_its_page_line_and_reason(tmp_path: Path) -> None:
    page = '# A page\n\n<!-- skip: next "needs a GPU" -->\n\n```sh\nnvidia-smi\n```\n'
    p = _pytest(_manual(tmp_path, {"gpu.md": page}))
    assert p.returncode == 0, p.stdout
    assert "SKIPPED [1] docs/gpu.md:5: needs a GPU" in p.stdout


def test_a_skip_without_a_reason_is_an_error(tmp_path: Path) -> None:
    page = "# A page\n\n<!-- skip: next -->\n\n```sh\nfalse\n```\n"
    p = _pytest(_manual(tmp_path, {"gpu.md": page}))
    assert p.returncode != 0
    assert "gpu.md:3: `skip: next` without a reason" in p.stdout + p.stderr


def test_console_steps_and_their_outputs() -> None:
    steps = console_steps("$ a \\\n  b\nout 1\nout 2\n$ c\n")
    assert steps == [(1, "a \\\n  b", "out 1\nout 2"), (5, "c", "")]
    assert output_matches("ok  …/x.yaml\n", "ok  /tmp/y/x.yaml   \n")
    assert not output_matches("ok  x.yaml", "ok  x.yaml\nerror: more")


def test_synopsis_lines_join_their_continuations_and_drop_comments() -> None:
    source = "gameday run [--a]   # a -b comment\n    [--c] X\ngameday list\n"
    assert synopsis_commands(source) == [
        (1, ["gameday", "run", "[--a]", "[--c]", "X"]),
        (3, ["gameday", "list"]),
    ]


def test_blocks_that_may_start_a_lab_take_the_lab_lock() -> None:
    assert not may_start_a_lab("gameday list\ngameday validate --lab x.yaml\ngameday -q plan a")
    assert not may_start_a_lab("gameday lab manifests --lab inventories/eks.yaml")
    assert not may_start_a_lab("gameday run --dry-run a")
    assert may_start_a_lab("gameday list\ngameday run --tag runbook")
    assert may_start_a_lab("gameday lab up --lab x.yaml")
    assert may_start_a_lab("docker compose -p team-stack up -d")


LEFT_UP = """# A page

```console
$ gameday lab up --lab inventories/local.yaml
lab 'local' is up: serving http://127.0.77.10:8000, ...
$ gameday lab status
serving      running        ready=True  restarts=0  http://127.0.77.10:8000
...
```
"""


def _processes_mentioning(text: str) -> set[int]:
    """The processes whose environment holds `text`."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text.encode() in (proc / "environ").read_bytes():
                found.add(int(proc.name))
        except OSError:
            continue
    return found


def test_a_lab_a_block_leaves_up_is_taken_down_after_it(tmp_path: Path) -> None:
    # the commands share the block's lab state (the second sees the lab the first brought up);
    # nothing of it runs once the block is done. The blocks' folders in a short one of their
    # own: the lab's sockets live there, and a socket's path is short.
    with tempfile.TemporaryDirectory(prefix="gd-") as blocks_tmp:
        p = _pytest(_manual(tmp_path, {"lab.md": LEFT_UP}), env={"TMPDIR": blocks_tmp})
        assert p.returncode == 0, p.stdout
        assert "1 passed" in p.stdout
        assert _processes_mentioning(blocks_tmp) == set()


SHELL_DIALECTS = {"bash", "shell", "zsh", "shell-session", "shellsession", "terminal"}
FENCE = re.compile(r"^([ \t]*)(```+|~~~+)[ \t]*([\w-]*)[^\n]*$", re.M)


def test_every_command_block_of_the_manual_is_one_the_tests_run() -> None:
    # a command in a block of another language (or none) would be shown and never run
    wrong = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        lines = text.splitlines()
        opened: tuple[int, str] | None = None
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            if opened is None:
                opened = (line, m.group(3))
                continue
            start, language = opened
            opened = None
            first = next((s.strip() for s in lines[start : line - 1] if s.strip()), "")
            untagged_command = language in ("", "text") and first.startswith(("$ ", "gameday "))
            if language in SHELL_DIALECTS or untagged_command:
                wrong.append(f"{page.relative_to(ROOT)}:{start}: ```{language}")
    assert wrong == [], "command blocks must be ```sh or ```console"


SKIP_THEN_BLOCK = re.compile(
    r"^[ \t]*<!-- skip: next .*?-->\n(?:[ \t]*\n)*[ \t]*```sh\n(?P<source>.*?)^[ \t]*```$",
    re.M | re.S,
)


def _skipped_blocks() -> list[tuple[str, int, str]]:
    """(page, line of the fence, source) of every block the manual skips."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        for m in SKIP_THEN_BLOCK.finditer(text):
            fence = text.count("\n", 0, m.start("source"))
            found.append((str(page.relative_to(ROOT)), fence, m.group("source")))
    return found


def test_the_gameday_commands_of_the_blocks_the_manual_skips_exist() -> None:
    # not run, but a misspelt subcommand or flag there still fails, at its page and line
    blocks = _skipped_blocks()
    assert len(blocks) >= 10
    problems = [
        f"{page}:{fence + line}: {problem}"
        for page, fence, source in blocks
        for line, call in gameday_calls(source)
        for problem in check_command(call)
    ]
    assert problems == []


def test_a_misspelt_subcommand_in_a_skipped_block_is_found() -> None:
    calls = gameday_calls("kubectl logs x | gameday triag -\ngameday lab manifets --lab a.yaml\n")
    assert calls == [
        (1, ["gameday", "triag", "-"]),
        (2, ["gameday", "lab", "manifets", "--lab", "a.yaml"]),
    ]
    assert check_command(calls[0][1]) == [
        "`gameday triag`: Error: No such command 'triag'. Did you mean 'triage'?"
    ]
    assert "No such command 'manifets'" in check_command(calls[1][1])[0]
    assert check_command(["gameday", "cleanup", "--expird"]) == [
        "`gameday cleanup` has no option --expird"
    ]
    joined = gameday_calls(".venv/bin/gameday run a.yaml \\\n    b.yaml --lab x.yaml\n")
    # an argument named gameday is not a call; a crontab line's command is
    assert gameday_calls("pip install gameday\nkind create cluster --name gameday\n") == []
    assert gameday_calls("*/5 * * * * gameday cleanup\n") == [(1, ["gameday", "cleanup"])]
    assert joined == [(1, ["gameday", "run", "a.yaml", "b.yaml", "--lab", "x.yaml"])]
