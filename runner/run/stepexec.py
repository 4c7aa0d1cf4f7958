"""Carrying out user-written steps (runner.spec.usersteps): a command as an argv list in a session
of its own, a playbook through ansible-runner against the lab's inventory, an HTTP request to a
node. None of them raises for the step failing: each returns a `StepRun` whose `observed` says
what happened in one line, and whose `output` (bounded, redacted) is the report's evidence.

A command's environment is minimal (PATH, HOME, LANG, TMPDIR) plus the lab's facts
(LabDriver.facts), the scenario's id, GAMEDAY_STATE_DIR when set, and the step's own `env`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx
import yaml

from runner.labs.base import LabDriver
from runner.labs.common.ansible import ansible_bin, write_unsafe
from runner.results.redact import redact
from runner.run.journal import OpenStep
from runner.run.orphans import MARK_ENV, stop_marked
from runner.spec.patterns import compile_user
from runner.spec.usersteps import (
    AnyUserStep,
    CommandStep,
    HttpStep,
    PlaybookStep,
    describe_user_step,
)

HEAD_BYTES = 64 * 1024  # output kept from the start
TAIL_BYTES = 64 * 1024  # and from the end
KILL_GRACE_S = 5.0  # SIGTERM to SIGKILL, for a step's group
POLL_S = 0.05  # how often a step's leftover group members are looked at while they have grace
DRAIN_S = 1.0  # how long a finished step's output is read on (a child of its own session holds it)
PASSED_ENV = ("HOME", "LANG", "TMPDIR")
OnEvent = Callable[[str, datetime | None], None]


@dataclass(frozen=True)
class StepRun:
    ok: bool
    observed: str  # one line: "exit 0", "exit 2 (expected 0); last output: ..."
    output: str = ""  # bounded and redacted


def _last_output(output: str, limit: int = 200) -> str:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    return lines[-1][-limit:] if lines else "(none)"


# ---- environment ---------------------------------------------------------------------------


def search_path() -> str:
    """This interpreter's scripts directory first, so `gameday` and `vllm-lab` resolve where
    only the virtualenv has them."""
    return os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", os.defpath)])


def step_env(facts: dict[str, str], scenario_id: str, extra: dict[str, str]) -> dict[str, str]:
    env = {"PATH": search_path()}
    env |= {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env |= facts
    env["GAMEDAY_SCENARIO"] = scenario_id
    if "GAMEDAY_STATE_DIR" in os.environ:
        env["GAMEDAY_STATE_DIR"] = os.environ["GAMEDAY_STATE_DIR"]
    return env | extra


def resolve_argv0(argv0: str, folder: Path, path: str) -> str | None:
    """A name with a slash is a path (relative: to the scenario's folder); a bare name is looked
    up on `path`."""
    if "/" in argv0:
        found = folder / argv0
        return str(found) if found.is_file() and os.access(found, os.X_OK) else None
    return shutil.which(argv0, path=path)


# ---- command -------------------------------------------------------------------------------


class _Capture:
    """A stream's first HEAD_BYTES and last TAIL_BYTES, and how many bytes fell between."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > TAIL_BYTES:
            cut = len(self.tail) - TAIL_BYTES
            self.dropped += cut
            del self.tail[:cut]

    def read_all(self, stream: IO[bytes]) -> None:
        # os.read returns what is there (up to the size): a step's output arrives as written
        while chunk := os.read(stream.fileno(), 65536):
            self.feed(chunk)

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes of output dropped ...]\n" if self.dropped else ""
        return redact(
            self.head.decode(errors="replace") + middle + self.tail.decode(errors="replace")
        )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the step's whole process group; SIGKILL to what is left of it KILL_GRACE_S
    later. The leader is awaited on its exit; members it leaves behind have no such event, so
    they are looked at every POLL_S until the grace ends."""
    deadline = time.monotonic() + KILL_GRACE_S
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(KILL_GRACE_S)
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _kill_group_now(proc: subprocess.Popen[bytes]) -> None:
    """_kill_group, for a runner that is stopping (Ctrl-C, SIGTERM, an error): should a second
    interrupt cut its grace short, the group gets SIGKILL at once instead."""
    done = False
    try:
        _kill_group(proc)
        done = True
    finally:
        if not done:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def run_command(
    step: CommandStep, folder: Path, env: dict[str, str], mark: str | None = None
) -> StepRun:
    """Run the step in a process group of its own, which ends with the step: past its timeout,
    when the runner stops (Ctrl-C, SIGTERM), and once its first process exits (what it left
    running in its group goes too; a process meant to outlive its step starts a session of its
    own). `mark` goes into the step's environment (MARK_ENV) so that `gameday cleanup` finds
    and stops the group after the runner was killed with no chance to (runner.run.orphans)."""
    prog = resolve_argv0(step.argv[0], folder, env["PATH"])
    if prog is None:
        where = f"in {folder}" if "/" in step.argv[0] else "on PATH"
        return StepRun(False, f"cannot run {step.argv[0]!r}: no such executable {where}")
    if mark is not None:
        env = env | {MARK_ENV: mark}
    cap = _Capture()
    proc: subprocess.Popen[bytes] | None = None
    # one `try` from the start on, so that an interrupt at any point reaches the group
    try:
        proc = subprocess.Popen(
            [prog, *step.argv[1:]],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the step's whole group is killed as one
        )
        assert proc.stdout is not None
        reader = threading.Thread(target=cap.read_all, args=(proc.stdout,), daemon=True)
        reader.start()
        rc = proc.wait(step.timeout_s)
    except OSError as exc:
        if proc is not None:
            _kill_group_now(proc)
            raise
        return StepRun(False, f"cannot run {step.argv[0]!r}: {exc.strerror or exc}")
    except subprocess.TimeoutExpired:
        assert proc is not None
        _kill_group(proc)
        reader.join(DRAIN_S)
        out = cap.text()
        return StepRun(
            False,
            f"timed out after {step.timeout_s:g} s: the process group was killed; "
            f"last output: {_last_output(out)}",
            out,
        )
    except BaseException:
        if proc is not None:
            _kill_group_now(proc)
        elif mark is not None:  # interrupted in Popen: a child may run, with its mark
            stop_marked([mark])
        raise
    if _group_alive(proc.pid):
        _kill_group_now(proc)
    reader.join(DRAIN_S)
    out = cap.text()
    if rc != step.expect_exit:
        return StepRun(
            False,
            f"exit {rc} (expected {step.expect_exit}); last output: {_last_output(out)}",
            out,
        )
    for rx in step.expect_output:
        if compile_user(rx).search(out) is None:
            return StepRun(
                False,
                f"exit {rc}, but no output matches /{rx}/; last output: {_last_output(out)}",
                out,
            )
    return StepRun(True, f"exit {rc}", out)


# ---- playbook ------------------------------------------------------------------------------


def run_playbook(
    step: PlaybookStep,
    folder: Path,
    inventory: Path,
    env: dict[str, str],
    on_event: OnEvent,
) -> StepRun:
    """Through ansible-runner against (an `!unsafe`-tagged copy of) the lab's inventory; each
    task's result per host goes to `on_event`."""
    import ansible_runner  # a second of imports, paid only by a run with a playbook step

    playbook = (folder / step.playbook).resolve()
    if not playbook.is_file():
        return StepRun(False, f"playbook {playbook} does not exist")
    with tempfile.TemporaryDirectory(prefix="gameday-userstep-") as private:
        # the extra variables and the inventory reach Ansible as data, never as templates
        write_unsafe(Path(private) / "env" / "extravars", dict(step.extra_vars))
        hosts = Path(private) / "inventory.yaml"
        write_unsafe(hosts, yaml.safe_load(inventory.read_text(encoding="utf-8")))
        result = ansible_runner.run(
            private_data_dir=private,
            playbook=str(playbook),
            inventory=str(hosts),
            limit=step.limit or None,
            tags=",".join(step.tags) or None,
            skip_tags=",".join(step.skip_tags) or None,
            quiet=True,
            timeout=int(step.timeout_s),
            envvars={
                **env,
                "PATH": ansible_bin() + os.pathsep + env["PATH"],
                "ANSIBLE_HOST_KEY_CHECKING": "False",
                "ANSIBLE_RETRY_FILES_ENABLED": "False",
                "ANSIBLE_NOCOLOR": "1",
            },
        )
        events = list(result.events)
        stdout = result.stdout.read() if result.stdout else ""
    failed = _task_events(events, on_event)
    out = redact(stdout[-TAIL_BYTES:])
    if result.status == "timeout":
        return StepRun(
            False, f"timed out after {int(step.timeout_s)} s: the playbook was stopped", out
        )
    if result.status == "successful" and result.rc == 0:
        return StepRun(True, f"playbook {step.playbook}: ok (rc 0)", out)
    return StepRun(
        False,
        f"playbook {step.playbook} failed ({result.status}, rc {result.rc})"
        + (f": {redact(failed)}" if failed else ""),
        out,
    )


TASK_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


def _task_events(events: list[dict[str, Any]], on_event: OnEvent) -> str:
    """Each task's result per host to `on_event`; the last failing task's message."""
    failed = ""
    for e in events:
        status = TASK_EVENTS.get(str(e.get("event")))
        if status is None:
            continue
        data = e.get("event_data", {})
        res = data.get("res", {}) or {}
        if status == "ok" and res.get("changed"):
            status = "changed"
        task, host = data.get("task", "?"), data.get("host", "?")
        if status in ("failed", "unreachable") and not data.get("ignore_errors"):
            msg = str(res.get("msg") or res.get("stderr") or "")[:300]
            failed = f"task {task!r} on {host}: {msg}"
        ts = _ts(e.get("created"))
        on_event(redact(f"task {task!r} on {host}: {status}"), ts)
    return failed


def _ts(created: Any) -> datetime | None:
    if not isinstance(created, str):
        return None
    try:
        stamp = datetime.fromisoformat(created)
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


# ---- http ----------------------------------------------------------------------------------


def run_http(step: HttpStep, base_url: str, client: httpx.Client) -> StepRun:
    url = base_url + step.path
    what = f"{step.method.value} {url}"
    try:
        r = client.request(
            step.method.value,
            url,
            json=step.json_body,
            headers=step.headers,
            timeout=step.timeout_s,
        )
    except httpx.TimeoutException:
        return StepRun(False, f"{what}: timed out after {step.timeout_s:g} s")
    except httpx.HTTPError as exc:
        return StepRun(False, f"{what}: {type(exc).__name__}: {exc}")
    body = redact(r.text[:HEAD_BYTES])
    if r.status_code != step.expect_status:
        return StepRun(
            False,
            f"HTTP {r.status_code} (expected {step.expect_status}); body: {_last_output(body)}",
            body,
        )
    return StepRun(True, f"HTTP {r.status_code}", body)


def run_step(
    step: AnyUserStep,
    *,
    folder: Path,
    env: dict[str, str],
    inventory: Path,
    url_of: Callable[[str], str],
    target: str,
    client: httpx.Client,
    on_event: OnEvent,
    mark: str | None = None,
) -> StepRun:
    if isinstance(step, CommandStep):
        return run_command(step, folder, env | step.env, mark)
    if isinstance(step, PlaybookStep):
        # the mark reaches ansible-playbook and what it starts, for cleanup after a kill -9
        return run_playbook(
            step, folder, inventory, env if mark is None else env | {MARK_ENV: mark}, on_event
        )
    return run_http(step, url_of(step.node or target), client)


# ---- undo at cleanup -----------------------------------------------------------------------


def run_undo(
    lab: LabDriver, step: OpenStep, client: httpx.Client, on_event: OnEvent, who: str = "cleanup"
) -> tuple[bool, str]:
    """Run a journalled undo in the folder its step ran in, with the lab's facts; whether it
    succeeded, and the line the report gives it."""
    assert step.undo is not None
    r = run_step(
        step.undo,
        folder=step.folder,
        env=step_env(lab.facts(), step.scenario, {}),
        inventory=lab.inventory.path,
        url_of=lab.url,
        target="",  # an undo's HTTP node is filled in when it is journalled
        client=client,
        on_event=on_event,
    )
    verdict = "ok" if r.ok else "FAILED"
    line = (
        f"{who} ran the undo of {step.what}: {describe_user_step(step.undo)}: {verdict}, "
        f"{r.observed}"
    )
    return r.ok, line
