"""User-written steps run for real: commands (exit codes, expected output, a hang past its
timeout, bounded and redacted output, the lab's facts), an Ansible playbook through
ansible-runner, an HTTP step against a small server, and the validation of what a scenario says
about them."""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.errors import ScenarioError
from runner.run import journal
from runner.run.stepexec import (
    HEAD_BYTES,
    TAIL_BYTES,
    run_command,
    run_http,
    run_playbook,
    run_step,
    step_env,
)
from runner.run.undo import cleanup_lab
from runner.spec.scenario import load_scenario
from runner.spec.usersteps import CommandStep, HttpStep, PlaybookStep
from tests.support.fakelab import fake_run, scenario_doc, wrong_flag
from tests.unit.runner.run.test_usersteps import set_wrong_flag

ENV = {"PATH": os.pathsep.join(["/usr/bin", "/bin"])}


def cmd(*argv: str, **kw: Any) -> CommandStep:
    return CommandStep(kind="command", argv=list(argv), **kw)


def py(code: str, **kw: Any) -> CommandStep:
    return cmd("python3", "-c", code, **kw)


def test_a_non_zero_exit_where_0_is_expected(tmp_path: Path) -> None:
    run = run_command(py("print('boom'); raise SystemExit(2)"), tmp_path, ENV)
    assert (run.ok, run.observed) == (False, "exit 2 (expected 0); last output: boom")


def test_an_expected_exit_and_output(tmp_path: Path) -> None:
    step = py(
        "import sys; print('KV cache: 1.50 GiB'); sys.exit(3)",
        expect_exit=3,
        expect_output=[r"KV cache: \d+\.\d+ GiB"],
    )
    assert run_command(step, tmp_path, ENV).observed == "exit 3"
    miss = py("print('nothing here')", expect_output=["KV cache"])
    run = run_command(miss, tmp_path, ENV)
    assert (run.ok, run.observed) == (
        False,
        "exit 0, but no output matches /KV cache/; last output: nothing here",
    )


def test_a_missing_program_is_named(tmp_path: Path) -> None:
    run = run_command(cmd("./fix.sh"), tmp_path, ENV)
    assert (run.ok, run.observed) == (
        False,
        f"cannot run './fix.sh': no such executable in {tmp_path}",
    )


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"  # killed, not yet reaped by its new parent


def test_a_hang_past_its_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    """The child ignores SIGTERM: SIGKILL reaches it 5 s later, with the rest of the group."""
    pidfile = tmp_path / "child.pid"
    code = (
        "import os, signal, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "print('waiting for the engine', flush=True)\n"
        "time.sleep(600)\n"
    )
    t0 = time.monotonic()
    run = run_command(py(code, timeout_s=1), tmp_path, ENV)
    took = time.monotonic() - t0
    assert (run.ok, run.observed) == (
        False,
        "timed out after 1 s: the process group was killed; last output: waiting for the engine",
    )
    assert 1 + 5 <= took < 1 + 6  # SIGTERM ignored: SIGKILL after the 5 s grace
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child)


def test_output_is_bounded_and_redacted(tmp_path: Path) -> None:
    total = 300 * 1024
    code = (
        "import sys\n"
        "sys.stdout.write('HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123\\n')\n"
        f"sys.stdout.write('a' * {total - 40} + '\\n')\n"
        "sys.stdout.write('the end\\n')\n"
    )
    run = run_command(py(code), tmp_path, ENV)
    written = (
        len("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123\n") + (total - 40) + 1 + len("the end\n")
    )
    dropped = written - HEAD_BYTES - TAIL_BYTES
    assert run.output.startswith("HF_TOKEN=<redacted>\naaa")
    assert f"\n[... {dropped} bytes of output dropped ...]\n" in run.output
    assert run.output.endswith("a\nthe end\n")
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in run.output
    assert run.observed == "exit 0"


def test_the_environment_is_minimal_plus_the_labs_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOMETHING_OF_THE_RUNNER", "not for steps")
    monkeypatch.setenv("GAMEDAY_STATE_DIR", "/tmp/state-x")
    script = tmp_path / "bin" / "show-env"
    script.parent.mkdir()
    script.write_text(
        "#!/usr/bin/env python3\nimport json, os\n"
        "print(json.dumps({**os.environ, 'CWD': os.getcwd()}))\n"
    )
    script.chmod(0o755)
    facts = {"GAMEDAY_NODE_SERVING_URL": "http://127.0.0.1:8000", "GAMEDAY_LAB_NAME": "t"}
    env = step_env(facts, "kv-cache", {"EXTRA": "1"})
    run = run_command(cmd("./bin/show-env"), tmp_path, env)
    seen = json.loads(run.output)
    assert seen.pop("CWD") == str(tmp_path)
    seen.pop("LC_CTYPE", None)  # the interpreter may set it itself
    expected_keys = {
        "PATH",
        "GAMEDAY_NODE_SERVING_URL",
        "GAMEDAY_LAB_NAME",
        "GAMEDAY_SCENARIO",
        "GAMEDAY_STATE_DIR",
        "EXTRA",
    } | {k for k in ("HOME", "LANG", "TMPDIR") if k in os.environ}
    assert set(seen) == expected_keys
    assert (seen["GAMEDAY_SCENARIO"], seen["GAMEDAY_STATE_DIR"], seen["EXTRA"]) == (
        "kv-cache",
        "/tmp/state-x",
        "1",
    )
    # the interpreter's scripts directory comes first: `vllm-lab` resolves from the virtualenv
    import sysconfig

    assert seen["PATH"].split(os.pathsep)[0] == sysconfig.get_path("scripts")


def test_the_facts_of_a_lab(tmp_path: Path) -> None:
    run = fake_run(tmp_path, scenario_doc())
    facts = run.lab.facts()
    assert facts["GAMEDAY_LAB"] == str((tmp_path / "inventory.yaml").resolve())
    assert facts["GAMEDAY_LAB_KIND"] == "local"
    assert facts["GAMEDAY_NODE_SERVING_URL"] == run.lab.url("serving")
    assert facts["GAMEDAY_NODE_SERVING_ADDRESS"] == run.lab.inventory.node("serving").address


# ---- playbook ----


PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: write the extra variable as it arrived
      tags: [kv]
      copy:
        dest: "{{ out_dir }}/{{ inventory_hostname }}.txt"
        content: "{{ note }}"
    - name: never with the kv tag
      tags: [other]
      copy:
        dest: "{{ out_dir }}/other-{{ inventory_hostname }}.txt"
        content: other
"""
FAILING = """
- hosts: all
  gather_facts: false
  tasks:
    - name: raise the KV cache
      fail:
        msg: "no room: HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123"
"""


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inventory.yaml"
    hosts = {
        h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        for h in ("serving", "node1")
    }
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return inv


def test_a_playbook_with_limit_tags_and_an_unsafe_extra_var(tmp_path: Path) -> None:
    (tmp_path / "kv.yaml").write_text(PLAYBOOK)
    out = tmp_path / "out"
    out.mkdir()
    step = PlaybookStep(
        kind="playbook",
        playbook="kv.yaml",
        limit="serving",
        tags=["kv"],
        extra_vars={"out_dir": str(out), "note": "{{ lookup('pipe','id') }}"},
        timeout_s=120,
    )
    events: list[tuple[str, datetime | None]] = []
    run = run_playbook(
        step,
        tmp_path,
        _inventory(tmp_path),
        step_env({}, "t", {}),
        lambda t, ts: events.append((t, ts)),
    )
    assert (run.ok, run.observed) == (True, "playbook kv.yaml: ok (rc 0)")
    assert sorted(p.name for p in out.iterdir()) == ["serving.txt"]
    assert (out / "serving.txt").read_text() == "{{ lookup('pipe','id') }}"
    assert [t for t, _ in events] == [
        "task 'write the extra variable as it arrived' on serving: changed"
    ]
    assert events[0][1] is not None and events[0][1].tzinfo is not None


def test_a_failing_playbook_names_its_task(tmp_path: Path) -> None:
    (tmp_path / "fail.yaml").write_text(FAILING)
    step = PlaybookStep(kind="playbook", playbook="fail.yaml", limit="node1", timeout_s=120)
    events: list[str] = []
    run = run_playbook(
        step, tmp_path, _inventory(tmp_path), step_env({}, "t", {}), lambda t, _ts: events.append(t)
    )
    assert (run.ok, run.observed) == (
        False,
        "playbook fail.yaml failed (failed, rc 2): task 'raise the KV cache' on node1: "
        "no room: HF_TOKEN=<redacted>",
    )
    assert events == ["task 'raise the KV cache' on node1: failed"]


# ---- http ----


@pytest.fixture
def server() -> Iterator[tuple[str, list[tuple[str, str, Any]]]]:
    seen: list[tuple[str, str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(("POST", self.path, body))
            status = 204 if self.path == "/admin/reset" else 404
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_a: Any) -> None:
            return

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    srv.shutdown()


def test_an_http_step_and_a_wrong_status(server: tuple[str, list[tuple[str, str, Any]]]) -> None:
    import httpx

    url, seen = server
    ok = HttpStep(
        kind="http", method="POST", path="/admin/reset", json={"cache": "kv"}, expect_status=204
    )
    wrong = HttpStep(kind="http", method="POST", path="/admin/nope", json=[1])
    with httpx.Client() as client:
        assert run_http(ok, url, client).observed == "HTTP 204"
        bad = run_http(wrong, url, client)
    assert (bad.ok, bad.observed) == (False, "HTTP 404 (expected 200); body: (none)")
    assert seen == [("POST", "/admin/reset", {"cache": "kv"}), ("POST", "/admin/nope", [1])]


# ---- validation ----


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_argv_that_is_not_a_list(tmp_path: Path) -> None:
    doc = scenario_doc(inject=[{"kind": "command", "argv": "./fix.sh --all"}])
    path = _write(tmp_path, doc)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    argv_line = path.read_text().splitlines().index("  argv: ./fix.sh --all") + 1
    assert exc.value.message == (
        f"{path}:{argv_line} [inject.0.argv]: argv is a list: [prog, arg, ...]; no shell"
    )


def test_a_missing_playbook_and_runbook(tmp_path: Path) -> None:
    doc = scenario_doc()
    doc["recover"][1]["runbook"] = "runbooks/kv.md#raise"
    path = _write(tmp_path, doc)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    assert exc.value.field == "recover.1.runbook"
    assert exc.value.message.startswith(f"{path}:")
    assert "runbook 'runbooks/kv.md#raise' does not exist" in exc.value.message
    doc["recover"][1]["runbook"] = "https://wiki.example/kv#raise"
    doc["recover"][0]["actions"] = [{"kind": "playbook", "playbook": "../elsewhere/fix.yaml"}]
    path = _write(tmp_path, doc)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    assert exc.value.field == "recover.0.actions.0.playbook"
    (tmp_path.parent / "elsewhere").mkdir(exist_ok=True)
    (tmp_path.parent / "elsewhere" / "fix.yaml").write_text(FAILING)
    assert load_scenario(path).scenario.recover[1].runbook == "https://wiki.example/kv#raise"


# ---- gameday cleanup ----
def test_gameday_cleanup_runs_journalled_undos_and_reapplies_the_baseline(
    tmp_path: Path,
) -> None:
    run = fake_run(tmp_path, scenario_doc(), wrong_flag())
    j = journal.Journal(run.lab.state_dir, "crashed")
    undo = CommandStep(kind="command", argv=["python3", "-c", "print('undone')"])
    j.record_step("fake-startup", tmp_path, "command ./fault.sh (timeout 60 s)", undo, "x")
    j.record_step(
        "fake-startup",
        tmp_path,
        "command ./break.py (timeout 60 s)",
        None,
        "an injected command has no undo",
    )
    set_wrong_flag(run.lab)  # what the run had done before it was killed
    outcome = cleanup_lab(run.lab)
    assert outcome.steps == [
        "cleanup ran the undo of command ./fault.sh (timeout 60 s): "
        "command python3 -c print('undone') (timeout 60 s): ok, exit 0",
        "cleanup re-applied the baseline of serving: an injected command has no undo",
    ]
    assert outcome.open_changes == 2
    assert journal.open_steps(run.lab.state_dir) == []
    assert run.lab.config("serving") == run.lab.baseline_config("serving")


def test_a_playbook_in_a_run_puts_its_tasks_on_the_timeline(tmp_path: Path) -> None:
    """A real playbook injected in a run on the fake lab (its inventory run locally by Ansible):
    the tasks' results are on the timeline as `ansible`, its output is evidence, and cleanup
    checks the baseline (the playbook has no undo)."""
    (tmp_path / "note.yaml").write_text(PLAYBOOK)
    out = tmp_path / "out"
    out.mkdir()
    step = {
        "kind": "playbook",
        "name": "leave a note",
        "playbook": "note.yaml",
        "limit": "serving",
        "tags": ["kv"],
        "extra_vars": {"out_dir": str(out), "note": "{{ lookup('pipe','id') }}"},
    }
    doc = scenario_doc()
    doc["inject"].append(step)
    run = fake_run(tmp_path, doc, wrong_flag())
    inv = run.lab.inventory.path
    data = yaml.safe_load(inv.read_text())
    data["all"]["vars"] |= {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
    }
    inv.write_text(yaml.safe_dump(data))
    result = run.run()
    assert result.verdict.value == "passed"
    assert [(e.source, e.event) for e in result.timeline if e.source == "ansible"] == [
        ("ansible", "task 'write the extra variable as it arrived' on serving: changed")
    ]
    assert (out / "serving.txt").read_text() == "{{ lookup('pipe','id') }}"
    assert [e.title for e in result.evidence if e.title.startswith("inject")] == [
        "inject: leave a note: playbook note.yaml --limit serving --tags kv (timeout 600 s): output"
    ]
    assert result.notes == [
        "recover 2 found every node at its baseline once it had restored serving from the "
        "journal (an injected playbook has no undo)"
    ]
    assert journal.open_steps(run.lab.state_dir) == []


def test_gameday_cleanup_keeps_a_failed_undo_journalled(tmp_path: Path) -> None:
    from runner.errors import LabError

    run = fake_run(tmp_path, scenario_doc(), wrong_flag())
    j = journal.Journal(run.lab.state_dir, "crashed")
    undo = CommandStep(kind="command", argv=["python3", "-c", "print('no access'); exit(4)"])
    j.record_step("fake-startup", tmp_path, "command ./fault.sh (timeout 60 s)", undo, "x")
    with pytest.raises(LabError) as exc:
        cleanup_lab(run.lab)
    assert exc.value.message == (
        "the undo of command ./fault.sh (timeout 60 s) (scenario fake-startup) failed: "
        "cleanup ran the undo of command ./fault.sh (timeout 60 s): "
        "command python3 -c print('no access'); exit(4) (timeout 60 s): FAILED, "
        "exit 4 (expected 0); last output: no access"
    )
    assert [s.what for s in journal.open_steps(run.lab.state_dir)] == [
        "command ./fault.sh (timeout 60 s)"
    ]


# ---- in the baseline's setup ----
def test_a_setup_command_that_fails_is_an_error_and_its_journalled_undo_runs(
    tmp_path: Path,
) -> None:
    """A real setup command: the first keeps its undo (run at cleanup, as an injected one's);
    the second exits 1, so the baseline cannot be judged (error, not failed) and nothing is
    injected."""
    marker = tmp_path / "undone"
    first = {
        "kind": "command",
        "argv": ["python3", "-c", "print('warm')"],
        "undo": {"kind": "command", "argv": ["python3", "-c", f"open({str(marker)!r}, 'w')"]},
    }
    fails = {"kind": "command", "argv": ["python3", "-c", "raise SystemExit(1)"]}
    doc = scenario_doc()
    doc["baseline"]["setup"] = [first, fails]
    # a rollback would undo the setup too (refused): the recovery puts back the flag
    doc["recover"][1]["actions"] = [{"kind": "set_args", "args": {"--max-model-len": None}}]
    run = fake_run(tmp_path, doc, wrong_flag())
    result = run.run()
    assert result.verdict.value == "error"
    head = result.assertions[0]
    assert head.name == "baseline: setup: command python3 -c raise SystemExit(1) (timeout 60 s)"
    assert head.observed == "exit 1 (expected 0); last output: (none)"
    assert marker.exists()  # cleanup ran the setup step's own undo
    assert run.lab.applied == []  # no engine change: neither setup's nor the injection's
    assert run.open_changes() == 0 and journal.open_steps(run.lab.state_dir) == []


def test_a_playbook_step_carries_its_mark_to_what_it_starts(tmp_path: Path) -> None:
    """ansible-playbook and its tasks' processes carry the step's mark, so `gameday cleanup`
    stops them after a kill -9 of the runner, as it stops a command step's."""
    (tmp_path / "mark.yaml").write_text(
        "- hosts: serving\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: the mark as the task's process sees it\n"
        '      ansible.builtin.shell: printf %s "$GAMEDAY_STEP_MARK" > {{ out }}\n'
    )
    out = tmp_path / "mark.txt"
    step = PlaybookStep(
        kind="playbook", playbook="mark.yaml", extra_vars={"out": str(out)}, timeout_s=120
    )
    run = run_step(
        step,
        folder=tmp_path,
        env=step_env({}, "t", {}),
        inventory=_inventory(tmp_path),
        url_of=lambda n: "",
        target="",
        client=None,  # type: ignore[arg-type]
        on_event=lambda t, ts: None,
        mark="m-0123456789",
    )
    assert run.ok, run.observed
    assert out.read_text() == "m-0123456789"
