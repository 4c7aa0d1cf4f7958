"""The manual's shell blocks as tests, through Sybil: every ```sh and ```console block of
README.md and docs/**/*.md is run from the checkout root (docs/benchmarks.md 'The manual's
commands' says the rules a page's author follows).

- ```sh: the block runs in bash (`-e -o pipefail`); it must exit 0. A failure names the page and
  the line of the command that failed.
- ```console: each `$ ` line is a command (a trailing `\\` continues it), the lines under it are
  what it prints (stdout and stderr as a terminal shows them). The output must match, `...` (or
  `…`) standing for any text (doctest's ELLIPSIS), trailing blanks ignored.
- `<!-- docs: synopsis -->` before a ```sh block: a synopsis with placeholders, checked rather than
  run: each `gameday` line's command path must exist and every flag it names must be in that
  command's `--help`.
- `<!-- skip: next "reason" -->` (Sybil's own): not run, a pytest skip with that reason; a skip
  without a reason is an error.

A block that is run gets its own lab state folder, holds the lab lock (/tmp/gameday-lab.lock,
the one people take with flock(1) on a shared machine) and, where it started a lab, takes down
every lab it named afterwards; `gameday` is the one beside the interpreter running the tests.
"""

from __future__ import annotations

import doctest
import fcntl
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from sybil import Document, Example, Region, Sybil
from sybil.integration.pytest import SybilItem
from sybil.parsers.markdown import CodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parents[2]
LAB_LOCK = Path("/tmp/gameday-lab.lock")
BLOCK_TIMEOUT_S = 600
SYNOPSIS = "synopsis"
FLAG = re.compile(r"(?<![\w=./-])--?[A-Za-z][\w-]*")
WORD = re.compile(r"^[a-z][a-z0-9-]*(?:\|[a-z][a-z0-9-]*)*$")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:\|[A-Z][A-Z0-9_]*)*(?:\.\.\.)?$")


def is_manual_page(path: Path, root: Path = ROOT) -> bool:
    """README.md at the root, and every page of docs/."""
    path = path.resolve()
    if path == root / "README.md":
        return True
    return path.suffix == ".md" and (root / "docs") in path.parents


def where(example: Example, offset: int = 0) -> str:
    """`page:line` of a block's line (`offset` lines below the fence), the page as pytest names
    it (from the folder it runs in)."""
    return f"{os.path.relpath(example.path)}:{example.line + offset}"


def manual_hooks(root: Path) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The pytest hooks that make the manual under `root` tests marked `docs`:
    pytest_collect_file and pytest_runtest_makereport, for a conftest.py to take."""
    collect = Sybil(parsers=parsers(), path=str(root), patterns=["*.md"]).pytest()

    def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if not is_manual_page(file_path, root):
            return None
        page: pytest.Collector | None = collect(file_path, parent)
        if page is not None:
            page.add_marker(pytest.mark.docs)
        return page

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """A skipped block is reported at its page and line, with the reason the page gives."""
        report = yield
        skipped = report.skipped and isinstance(report.longrepr, tuple)
        if skipped and isinstance(item, SybilItem):
            path, line, _ = item.reportinfo()
            report.longrepr = (os.path.relpath(path), line, report.longrepr[2])
        return report

    return pytest_collect_file, pytest_runtest_makereport


class ReasonedSkipParser(SkipParser):
    """Sybil's `<!-- skip: ... -->`, where `next` and `start` must say why."""

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in super().__call__(document):
            action, reason = region.parsed
            if action in ("next", "start") and not (reason or "").strip():
                line = document.text.count("\n", 0, region.start) + 1
                raise ValueError(f"{document.path}:{line}: `skip: {action}` without a reason")
            yield region


DIRECTIVE = re.compile(r"^[ \t]*<!--\s*docs:\s*(?P<mode>[\w-]+)\s*-->[ \t]*\n(?:[ \t]*\n)*", re.M)


class ShellBlockParser(CodeBlockParser):
    """```sh blocks: run, or checked as a synopsis where `<!-- docs: synopsis -->` precedes the
    block (only blank lines between: the mark belongs to its block, whichever tests are
    selected)."""

    def __init__(self) -> None:
        super().__init__(language="sh", evaluator=evaluate_sh)

    def __call__(self, document: Document) -> Iterable[Region]:
        marks = {m.end(): m for m in DIRECTIVE.finditer(document.text)}
        for m in marks.values():
            if m.group("mode") != SYNOPSIS:
                line = document.text.count("\n", 0, m.start()) + 1
                raise ValueError(f"{document.path}:{line}: unknown `docs: {m.group('mode')}`")
        for region in super().__call__(document):
            start = document.text.rfind("\n", 0, region.start) + 1  # the fence line's indent
            if marks.pop(start, None) is not None:
                region.evaluator = evaluate_synopsis
            yield region
        for m in marks.values():
            line = document.text.count("\n", 0, m.start()) + 1
            raise ValueError(f"{document.path}:{line}: `docs: synopsis` not before a ```sh block")


def parsers() -> list[Callable[[Document], Iterable[Region]]]:
    return [
        ReasonedSkipParser(),
        ShellBlockParser(),
        CodeBlockParser(language="console", evaluator=evaluate_console),
    ]


# --- running a block -------------------------------------------------------------------------


def _holder_is_ancestor(path: Path) -> bool:
    """Whether the lock is held by this process or one it runs under (`flock LOCK pytest`):
    taking it again would wait for ourselves."""
    try:
        st = path.stat()
        locks = Path("/proc/locks").read_text()
    except OSError:
        return False
    holders = set()
    for line in locks.splitlines():
        # 1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].endswith(f":{st.st_ino}"):
            holders.add(int(fields[4]))
    pid = os.getpid()
    while pid > 1:
        if pid in holders:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


# gameday's commands that never start a lab, and programs that may start one
NO_LAB = {"list", "validate", "plan", "schema", "triage", "report", "history", "timeline", "init"}
LAB_PROGRAMS = re.compile(r"(?<![\w/.-])(docker|docker-compose|kubectl|kind|make|pytest|vllm)\b")
GAMEDAY_CALL = re.compile(
    r"(?<![\w/.-])gameday((?:[ \t]+-[qv])*)[ \t]+([a-z][\w-]*)([ \t]+[a-z][\w-]*)?"
)


def may_start_a_lab(source: str) -> bool:
    """Whether a block may start a lab: any gameday command but those that only read (`lab`
    verbs included: `lab manifests` only prints), or a program that starts one."""
    if LAB_PROGRAMS.search(source):
        return True
    for m in GAMEDAY_CALL.finditer(source):
        verb, sub = m.group(2), (m.group(3) or "").strip()
        line = source.split("\n")[source.count("\n", 0, m.start())]
        reads = verb in NO_LAB or (verb == "lab" and sub == "manifests") or "--dry-run" in line
        if not reads:
            return True
    return False


@contextmanager
def lab_lock(source: str) -> Iterator[None]:
    """The machine's lab lock, while a block that may start a lab runs."""
    if not may_start_a_lab(source) or _holder_is_ancestor(LAB_LOCK):
        yield
        return
    with open(LAB_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def block_env(state_dir: Path) -> dict[str, str]:
    """This environment as a user's shell has it with the project's venv active: its `gameday`
    first on PATH (the interpreter's own bin/, not whatever PATH holds), a lab state folder of
    the block's own, and no GAMEDAY_LAB (the page's defaults apply)."""
    env = {k: v for k, v in os.environ.items() if k != "GAMEDAY_LAB"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["GAMEDAY_STATE_DIR"] = str(state_dir)
    env["TMPDIR"] = str(state_dir.parent)  # what `mktemp` makes goes when the block ends
    return env


def _bash(source: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", source],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )


def _labs_down(source: str, env: dict[str, str], cwd: Path) -> list[str]:
    """`gameday lab down` of every lab the block named (`--lab X`) and of the folder's default,
    from the folder the block ended in; what failed."""
    invs = [m.group(1) for m in re.finditer(r"--lab[ =](\S+)", source)]
    gameday = str(Path(sys.executable).parent / "gameday")
    failed = []
    for inv in [*dict.fromkeys(i for i in invs if (cwd / i).is_file()), None]:
        argv = [gameday, "lab", "down", *(["--lab", inv] if inv else [])]
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            failed.append(f"`{shlex.join(argv[1:])}` in {cwd} exited {p.returncode}: {p.stderr}")
    return failed


class Session:
    """One block's shell: a lab state folder and a TMPDIR of its own; each script runs in bash
    from the folder the one before ended in (the first from the checkout root)."""

    def __init__(self, tmp: Path) -> None:
        self.state, self.failed_at, self.ended = tmp / "state", tmp / "failed", tmp / "cwd"
        self.state.mkdir()
        self.env = block_env(self.state)
        self.cwd = ROOT
        self.sources: list[str] = []

    def run(self, source: str) -> tuple[subprocess.CompletedProcess[str], int | None]:
        """The script's process, and its line (1-based) that failed."""
        self.sources.append(source)
        self.failed_at.unlink(missing_ok=True)
        # the line of a failed command, and the folder the script ends in (it may `cd`)
        script = (
            f"trap 'printf %s \"$LINENO\" >{shlex.quote(str(self.failed_at))}' ERR\n"
            f"trap 'pwd >{shlex.quote(str(self.ended))}' EXIT\n{source}"
        )
        p = _bash(script, self.env, self.cwd)
        if self.ended.exists() and (ended := Path(self.ended.read_text().strip())).is_dir():
            self.cwd = ended
        line = int(self.failed_at.read_text()) - 2 if self.failed_at.exists() else None
        return p, line

    def labs_down(self) -> list[str]:
        """Where a lab came up: `lab down` of each the scripts named; what failed."""
        if not any(self.state.iterdir()):
            return []
        return _labs_down("\n".join(self.sources), self.env, self.cwd)


@contextmanager
def session(source: str) -> Iterator[Session]:
    """A block's session, under the lab lock where the block may start a lab."""
    with tempfile.TemporaryDirectory(prefix="gameday-docs-") as tmp, lab_lock(source):
        yield Session(Path(tmp))


def evaluate_sh(example: Example) -> str | None:
    source: str = str(example.parsed)
    with session(source) as shell:
        try:
            p, line = shell.run(source)
        finally:
            left = shell.labs_down()
    problems = []
    if p.returncode != 0:
        at = where(example, line) if line else where(example)
        problems.append(f"{at}: the block exited {p.returncode}; its output:\n{_tail(p.stdout)}")
    problems += [f"{where(example)}: a lab it started did not come down: {x}" for x in left]
    return "\n".join(problems) or None


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join("    " + s for s in text.rstrip().splitlines()[-lines:])


# --- console blocks: commands and their output ---------------------------------------------


def console_steps(source: str) -> list[tuple[int, str, str]]:
    """(line in the block, command, expected output) for each `$ ` command."""
    steps: list[tuple[int, str, list[str]]] = []
    continued = False
    for i, line in enumerate(source.splitlines(), start=1):
        if continued:
            steps[-1] = (steps[-1][0], steps[-1][1] + "\n" + line, steps[-1][2])
        elif line.startswith("$ "):
            steps.append((i, line[2:], []))
        elif steps:
            steps[-1][2].append(line)
        else:
            raise ValueError(f"line {i} of a console block is output before any `$ ` command")
        continued = line.endswith("\\") and not steps[-1][2]
    return [(i, cmd, "\n".join(out)) for i, cmd, out in steps]


def output_matches(want: str, got: str) -> bool:
    """doctest's ELLIPSIS match, `…` read as `...`, trailing blanks ignored."""

    def norm(s: str) -> str:
        return "\n".join(line.rstrip() for line in s.strip("\n").splitlines()) + "\n"

    checker = doctest.OutputChecker()
    return checker.check_output(norm(want.replace("…", "...")), norm(got), doctest.ELLIPSIS)


def evaluate_console(example: Example) -> str | None:
    source: str = str(example.parsed)
    problems = []
    with session(source) as shell:
        try:
            for line, command, want in console_steps(source):
                p, _ = shell.run(command)
                if not output_matches(want, p.stdout):
                    problems.append(
                        f"{where(example, line)}: `{command}` printed (exit {p.returncode}):\n"
                        f"{_tail(p.stdout, 60)}\n  the page shows:\n{_tail(want, 60)}"
                    )
        finally:
            left = shell.labs_down()
    problems += [f"{where(example)}: a lab it started did not come down: {x}" for x in left]
    return "\n".join(problems) or None


# --- synopses: command paths and flags ------------------------------------------------------


def synopsis_commands(source: str) -> list[tuple[int, list[str]]]:
    """(line in the block, tokens) of each command; an indented line continues the one above,
    `# ...` is a comment."""
    commands: list[tuple[int, list[str]]] = []
    for i, line in enumerate(source.splitlines(), start=1):
        text = re.split(r"(?:^|\s)#\s", line, maxsplit=1)[0]
        if not text.strip():
            continue
        if line[:1].isspace() and commands:
            commands[-1][1].extend(text.split())
        else:
            commands.append((i, text.split()))
    return commands


def _help(path: list[str]) -> click.testing.Result:
    from runner.cli.main import main

    return CliRunner().invoke(main, [*path, "--help"], prog_name="gameday")


def _options(help_text: str) -> set[str]:
    """The options a command's `--help` lists (its Options section, each head at two spaces)."""
    section = help_text.split("\nOptions:\n", 1)[-1] if "\nOptions:\n" in help_text else ""
    heads = []
    for line in section.splitlines():
        if line and not line.startswith(" "):
            break
        if re.match(r"^  -", line):
            heads.append(re.split(r"\s{2,}", line.strip(), maxsplit=1)[0])
    return {f for head in heads for f in FLAG.findall(head)}


def _flags(tokens: list[str]) -> list[str]:
    return list(dict.fromkeys(f for t in tokens for f in FLAG.findall(t)))


def _commands(tokens: list[str]) -> list[tuple[list[str], list[str], click.testing.Result]]:
    """Each command path a line names after `gameday` (`a|b`: each; words are taken while the
    command so far is a group), the tokens after it, and its `--help`."""
    found = []

    def walk(path: list[str], rest: list[str]) -> None:
        result = _help(path)
        group = result.exit_code == 0 and "\nCommands:\n" in result.output
        if group and rest and WORD.match(rest[0]):
            for alt in rest[0].split("|"):
                walk([*path, alt], rest[1:])
            return
        found.append((path, rest, result))

    walk([], tokens[1:])
    return found


def check_command(tokens: list[str]) -> list[str]:
    """What is wrong with one `gameday` line: a command path that does not exist, a flag its
    command does not take."""
    if tokens[0] != "gameday":
        return [f"`{tokens[0]}` is not gameday's: a synopsis of it cannot be checked"]
    problems = []
    for path, rest, result in _commands(tokens):
        if result.exit_code != 0:
            problems.append(f"`gameday {' '.join(path)}`: {result.output.strip().splitlines()[-1]}")
            continue
        flags = _flags(rest)
        missing = [f for f in flags if f not in _options(result.output)]
        # a group followed by a placeholder may route it to a command (`drill SCENARIO`)
        if missing and rest and PLACEHOLDER.match(rest[0]):
            routed = _help([*path, rest[0]])
            if routed.exit_code == 0:
                missing = [f for f in missing if f not in _options(routed.output)]
        if missing:
            problems.append(f"`gameday {' '.join(path)}` has no option {', '.join(missing)}")
    return problems


SEPARATORS = ("|", "||", "&&", ";")
CRON = re.compile(r"^[\d*/,-]+$")


def gameday_calls(source: str) -> list[tuple[int, list[str]]]:
    """(line in the block, tokens from `gameday` on) of each gameday command of a shell block
    (`\\`-continued lines joined, `.venv/bin/gameday` too, a crontab line's): one starts a line
    or follows `|`, `&&`, `||` or `;`, and ends at the next of them or a redirection."""
    calls = []
    joined: list[tuple[int, str]] = []
    for i, line in enumerate(source.splitlines(), start=1):
        if joined and joined[-1][1].endswith("\\"):
            joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + line)
        else:
            joined.append((i, line))
    for i, line in joined:
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            tokens = line.split("#")[0].split()
        for k, token in enumerate(tokens):
            # where a command starts: a line's start, after a separator, after cron's fields
            starts = k == 0 or tokens[k - 1] in SEPARATORS or all(map(CRON.match, tokens[:k]))
            if starts and (token == "gameday" or token.endswith("/gameday")):
                call = ["gameday"]
                for t in tokens[k + 1 :]:
                    if t in SEPARATORS or t.startswith((">", "<", "2>")):
                        break
                    call.append(t)
                calls.append((i, call))
    return calls


def evaluate_synopsis(example: Example) -> str | None:
    source: str = str(example.parsed)
    problems = [
        f"{where(example, line)}: {problem}"
        for line, tokens in synopsis_commands(source)
        for problem in check_command(tokens)
    ]
    return "\n".join(problems) or None
