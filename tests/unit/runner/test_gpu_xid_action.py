"""The `gpu_xid` program of a scenario's start_process, and the seeds' kernel-log watch as an
alert rule of every lab."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from runner.labs.common.prometheus_config import rule_groups
from runner.run.plan import describe_action
from runner.spec.actions import Program, StartProcess, XidCode
from runner.spec.inventory_load import load_inventory
from vllmfacts.xid import Xid

ROOT = Path(__file__).resolve().parents[3]


def test_a_gpu_xid_program_names_its_xid() -> None:
    a = StartProcess(kind="start_process", node="node1", name="gpu0-xid", program="gpu_xid", xid=79)
    assert a.argv() == ["vllm-lab", "xid", "--xid", "79"]
    assert "(gpu_xid, XID 79)" in describe_action(a)
    stray = StartProcess(
        kind="start_process", node="node1", name="omniparser", program="stray_gpu_process", mib=9
    )
    assert stray.argv()[-2:] == ["--mib", "9"]
    assert {int(x) for x in XidCode} == {int(x) for x in Xid}  # the scenario's set, the lab's


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"program": "gpu_xid"}, "xid (48 or 79) is given for program gpu_xid"),
        ({"program": "stray_gpu_process", "xid": 79}, "and only for it"),
        ({"program": "gpu_xid", "xid": 79, "mib": 10}, "mib is given only for program"),
        ({"program": "gpu_xid", "xid": 13}, "Input should be 48 or 79"),
    ],
)
def test_a_program_gets_only_its_own_parameters(fields: dict[str, object], why: str) -> None:
    with pytest.raises(ValidationError) as e:
        StartProcess.model_validate({"kind": "start_process", "node": "n", "name": "x", **fields})
    assert why in str(e.value)
    assert Program.GPU_XID.value == "gpu_xid"


def test_the_kernel_log_watch_is_a_rule_with_its_window_in_lab_time() -> None:
    mon = load_inventory(ROOT / "inventories" / "local.yaml").lab.monitoring
    assert mon is not None
    rules = {r["alert"]: r for r in rule_groups(mon, 100)["groups"][0]["rules"]}
    xid = rules["GpuXidError"]
    # 6 h real at x100: 216 s; the rise of the watch's count within it fires
    assert xid["expr"] == (
        "(node_kernel_log_nvrm_xid_lines > 0 unless node_kernel_log_nvrm_xid_lines offset "
        "216000ms) or (node_kernel_log_nvrm_xid_lines - node_kernel_log_nvrm_xid_lines offset "
        "216000ms > 0)"
    )
    assert "$window" not in str(rules)  # no other rule has one left unscaled
    assert "reset its GPU" in xid["annotations"]["procedure"]
    assert xid["annotations"]["runbook_section"].startswith("seeds/001")
    assert rules["ServingDown"]["expr"] == 'up{job="vllm"} < 1 or absent(up{job="vllm"})'


def test_an_xid_is_in_place_when_the_node_says_the_device_broke(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device breaks as the program runs, inside the host action (an Ansible play takes
    seconds): the fault's time is the node's record of the break, neither the action's start nor
    its end; a reconfiguration's is its end. A fault file of an earlier run is not this one's."""
    from datetime import UTC, datetime, timedelta
    from types import SimpleNamespace

    from runner.run import apply
    from runner.run.journal import Journal
    from runner.spec.actions import SetEnv
    from tests.support.fakelab import fake_run, scenario_doc

    lab = fake_run(tmp_path, scenario_doc()).lab
    t = [datetime(2026, 12, 4, tzinfo=UTC) + timedelta(seconds=s) for s in range(4)]
    clock = iter(t)
    monkeypatch.setattr(apply, "utcnow", lambda: next(clock))
    monkeypatch.setattr(apply, "POLL_S", 0.001)
    # the node's records: an earlier run's break, then this one's, half a second in
    records = iter([t[0] - timedelta(hours=1), None, t[0] + timedelta(seconds=0.5)])
    monkeypatch.setattr(lab, "xid_broke_at", lambda node: next(records))
    events: list[str] = []
    rec = SimpleNamespace(event=lambda what, **k: events.append(what), notes=[])
    ctx = SimpleNamespace(
        lab=lab,
        journal=Journal(lab.state_dir, "run-1"),
        scenario_id="s",
        open_changes=[],
        rec=rec,
        fault_at=None,
        fault_began_at=None,
        kernel_logged=set(),
    )
    xid = StartProcess(
        kind="start_process", node="serving", name="gpu0-xid", program="gpu_xid", xid=79
    )
    apply.apply_actions(ctx, [xid], apply.INJECT)  # type: ignore[arg-type]
    broke = t[0] + timedelta(seconds=0.5)
    assert (ctx.fault_at, ctx.fault_began_at) == (broke, broke)
    assert "serving: gpu0-xid broke the GPU" in events
    assert ctx.kernel_logged == {"serving"}  # cleanup reboots its kernel log
    env = SetEnv(kind="set_env", node="serving", env={"VLLM_LOGGING_LEVEL": "DEBUG"})
    apply.apply_actions(ctx, [env], apply.INJECT)  # type: ignore[arg-type]
    assert (ctx.fault_at, ctx.fault_began_at) == (t[2], broke)  # t[1]: its start


def test_an_xid_program_that_breaks_nothing_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from runner.errors import LabError
    from runner.run import apply
    from tests.support.fakelab import fake_run, scenario_doc

    run = fake_run(tmp_path, scenario_doc())
    monkeypatch.setattr(apply, "GPU_HOLD_TIMEOUT_S", 0.05)
    monkeypatch.setattr(run.lab, "xid_broke_at", lambda node: None)
    ctx = SimpleNamespace(lab=run.lab, rec=SimpleNamespace(event=lambda *a, **k: None))
    xid = StartProcess(
        kind="start_process", node="serving", name="gpu0-xid", program="gpu_xid", xid=79
    )
    with pytest.raises(LabError, match=r"did not break the node's GPU within 0\.05 s"):
        apply.wait_device_broken(ctx, xid, datetime.now(UTC))  # type: ignore[arg-type]


def test_cleanup_leaves_the_next_run_a_node_as_booted(tmp_path: Path) -> None:
    """The reset keeps the kernel log's XID lines, and GpuXidError pages on them for hours (216
    s at x100): a second run soon after would find its alert firing before its injection.
    Cleanup reboots the kernel log of every node the run wrote an XID to, and only those."""
    from tests.support.fakelab import fake_run, scenario_doc

    doc = scenario_doc()
    doc["inject"] = [
        {
            "kind": "start_process",
            "node": "serving",
            "name": "gpu0-xid",
            "program": "gpu_xid",
            "xid": 79,
        }
    ]
    run = fake_run(tmp_path, doc)
    rebooted: list[str] = []
    run.lab.reboot_kernel_log = rebooted.append  # type: ignore[method-assign,assignment]
    result = run.run()
    assert rebooted == ["serving"]
    assert any("kernel log as after a reboot" in e.event for e in result.timeline)
    rebooted.clear()
    fake_run(tmp_path / "plain", scenario_doc()).run()
    assert rebooted == []


def test_gameday_cleanup_reboots_the_kernel_log_of_an_interrupted_xid_run(tmp_path: Path) -> None:
    """A run killed while its XID's program ran: `gameday cleanup` stops the program and reboots
    that node's kernel log, and no other node's (a stopped container cannot be asked)."""
    from runner.labs.common.planning import start_process
    from runner.labs.fake import FakeLab
    from runner.run.journal import Journal
    from runner.run.undo import cleanup_lab
    from tests.support.fakelab import inventory

    lab = FakeLab(inventory(tmp_path), state_dir=tmp_path / "state")
    lab.up()
    journal = Journal(lab.state_dir, "killed")
    for node, cmd in (("node1", ["vllm-lab", "xid", "--xid", "79"]), ("node2", ["sleep", "1"])):
        change = start_process(lab, node, f"{node}-program", cmd)
        journal.record("s", change)
        lab.apply(change)
    rebooted: list[str] = []
    lab.reboot_kernel_log = rebooted.append  # type: ignore[method-assign,assignment]
    cleanup_lab(lab)
    assert rebooted == ["node1"]
    assert lab.leftovers() == []
