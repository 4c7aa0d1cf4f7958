"""`run --parallel N` on a machine that holds fewer instances: said before the run, in the
terminal and in each scenario's notes, not met as a probe timeout in the baseline."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runner import procstat
from runner.cli.main import main
from runner.labs.cost import InstanceCost
from runner.results.rundirs import LATEST
from runner.run import capacity
from runner.run.capacity import overload
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import LabKind
from tests.unit.runner.test_hostile_input import ROOT, _IdleLab

LOCAL = ROOT / "inventories" / "local.yaml"
THREE = ["tp-mismatch", "context-window-overflow", "kv-cache-shortage"]


def test_the_machine_holds_what_fits_the_measured_cost() -> None:
    inv = load_inventory(LOCAL)
    # 0.4 core on average, 0.8 at peak: n x 0.4 + 0.4 <= cores
    assert overload(inv, 1, cores=1, cost=COST) is None
    assert overload(inv, 4, cores=2, cost=COST) is None  # 1.6 + 0.4 = 2.0
    over = overload(inv, 5, cores=2, cost=COST)  # 2.0 + 0.4 > 2
    assert over is not None and (over.asked, over.holds, over.cores) == (5, 4, 2)
    said = over.sentence()
    assert said.startswith("--parallel 5 on 2 usable core(s): one instance of lab 'local'")
    assert "takes 0.40 core on average and 0.80 in its busiest second (measured a test by" in said
    assert "so n x 0.40 + 0.40 <= 2 holds 4; beyond that probes starve" in said
    assert over.hint().startswith("--parallel 4")
    one = overload(inv, 2, cores=1, cost=COST)  # 0.8 + 0.4 > 1
    assert one is not None and one.holds == 1


def test_the_rule_is_every_instance_at_its_mean_and_one_at_its_peak() -> None:
    assert COST.headroom == pytest.approx(0.4)
    assert COST.fits(4, 2.0) and not COST.fits(5, 2.0)
    assert COST.by_cores(2.0) == 4
    assert COST.by_cores(1.99) == 3
    assert COST.by_cores(0.5) == 1  # never fewer than one
    assert _auto(1000, 0.0, ROOMY, scenarios=100).n == capacity.MAX_PARALLEL
    flat = InstanceCost("a test", "a test", 0.5, 0.3, 100, 50)  # peak below mean
    assert flat.headroom == 0 and flat.by_cores(2.0) == 4


def test_compose_instances_share_the_machine_too() -> None:
    compose = load_inventory(ROOT / "inventories" / "compose.yaml")
    assert overload(compose, 5, cores=2, cost=COST) is not None
    assert overload(compose, 8, cores=2) is not None  # at its own measured cost


def test_kubernetes_instances_run_on_the_cluster_not_here() -> None:
    inv = load_inventory(ROOT / "inventories" / "eks.yaml")
    assert overload(inv, 8, cores=2) is None


def _idle_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str, cores: int = 1) -> Any:
    import runner.run.suite

    def run_scenario(ls: Any, lab: Any, journal: Any, progress: Any) -> Any:
        return runner.run.suite.skipped(ls, lab)

    monkeypatch.setattr(runner.run.suite, "run_scenario", run_scenario)
    monkeypatch.setattr(runner.run.suite, "open_lab", lambda inv: _IdleLab(inv, tmp_path / "state"))
    monkeypatch.setattr(capacity, "usable_cores", lambda: cores)
    monkeypatch.setattr(capacity, "instance_cost", lambda kind: COST)
    scenarios = [str(ROOT / "scenarios" / f"{s}.yaml") for s in THREE]
    return CliRunner().invoke(
        main,
        ["run", *scenarios, "--lab", str(LOCAL), "--reports", str(tmp_path / "reports"), *args],
    )


def test_run_says_before_it_starts_that_the_machine_holds_fewer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _idle_run(monkeypatch, tmp_path, "--parallel", "3")
    assert got.exit_code == 0, got.output
    err = " ".join(got.stderr.split())
    assert err.startswith("warning: --parallel 3 on 1 usable core(s)"), err
    assert "hint: --parallel 1" in err
    result = json.loads((tmp_path / "reports" / LATEST / "result.json").read_text())
    for s in result["scenarios"]:
        assert any("<= 1 holds 1; beyond that" in n for n in s["notes"]), s["notes"]


def test_no_warning_within_what_the_machine_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _idle_run(monkeypatch, tmp_path, "--parallel", "3", cores=2)
    assert got.exit_code == 0, got.output
    assert "warning" not in got.stderr
    result = json.loads((tmp_path / "reports" / LATEST / "result.json").read_text())
    assert not any("holds" in n for s in result["scenarios"] for n in s["notes"])


def test_a_dry_run_says_it_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    got = _idle_run(monkeypatch, tmp_path, "--parallel", "3", "--dry-run")
    assert got.exit_code == 0, got.output
    assert "warning: --parallel 3 on 1 usable core(s)" in " ".join(got.stderr.split())


# --parallel auto: as many instances as the machine holds, from its figures


# 0.4 core on average, 0.8 in the busiest second; 100 MiB fixed (supervisor, Prometheus,
# Alertmanager) + 60 MiB per node: 400 MiB for five
COST = InstanceCost(
    measured="a test",
    by="tests/unit",
    cpu_mean=0.4,
    cpu_peak=0.8,
    fixed_mib=100,
    per_node_mib=60,
)
ROOMY = 64 * 1024.0  # MiB available: memory never the limit
IDLE = capacity.Machine(2, 0.0, ROOMY)


def _auto(cores: int, busy: float, mib: float, scenarios: int = 7, inv: str = "local") -> Any:
    inventory = load_inventory(ROOT / "inventories" / f"{inv}.yaml")
    return capacity.auto_parallel(inventory, scenarios, capacity.Machine(cores, busy, mib), COST)


def test_auto_takes_as_many_as_fit_the_free_cores_at_the_measured_cost() -> None:
    assert _auto(2, 0.0, ROOMY).n == 4  # 4 x 0.4 + 0.4 = 2.0
    assert _auto(4, 0.2, ROOMY, scenarios=20).n == 8  # 3.8 free: 8 x 0.4 + 0.4 = 3.6
    assert _auto(1, 0.0, ROOMY).n == 1
    why = _auto(2, 0.0, ROOMY).why
    assert why.startswith("2 usable core(s), 0.0 busy, 2.0 free; one instance takes 0.40 core")
    assert "so n x 0.40 + 0.40 <= 2.0 holds 4;" in why


def test_auto_leaves_the_cores_other_work_keeps_busy() -> None:
    assert _auto(2, 1.0, ROOMY).n == 1  # a spinning process on one of two cores
    assert _auto(2, 0.3, ROOMY).n == 3  # 1.7 free: 3 x 0.4 + 0.4 = 1.6
    assert _auto(4, 1.6, ROOMY).n == 5  # 2.4 free: 5 x 0.4 + 0.4 = 2.4
    assert _auto(2, 2.0, ROOMY).n == 1  # never fewer than one
    assert _auto(2, 2.5, ROOMY).n == 1  # busier than the usable cores (other CPU sets)


def test_auto_fits_the_lab_measured_cost_in_the_memory_available() -> None:
    assert COST.memory_mib(load_inventory(LOCAL)) == 400
    # 80 % of 1500 MiB is 1200: three instances of 400 MiB
    assert _auto(16, 0.0, 1500).n == 3
    assert _auto(16, 0.0, 400).n == 1
    why = _auto(16, 0.0, 1500).why
    assert (
        "1.5 GiB available, 80% of it holds 3 at 400 MiB each (100 MiB + 60 MiB x 5 nodes)" in why
    )


def test_auto_runs_no_instance_without_a_scenario_for_it() -> None:
    assert _auto(16, 0.0, ROOMY, scenarios=3).n == 3
    assert _auto(16, 0.0, ROOMY, scenarios=1).n == 1
    assert "7 scenario(s) apply" in _auto(2, 0.0, ROOMY).why


def test_auto_on_kubernetes_is_one_instance_per_scenario_up_to_the_cap() -> None:
    # the cluster runs the instances: this machine's cores and memory do not count
    assert _auto(1, 1.0, 100, scenarios=5, inv="eks").n == 5
    many = _auto(1, 1.0, 100, scenarios=30, inv="eks")
    assert many.n == capacity.CLUSTER_AUTO_CAP
    assert "run on the cluster's nodes" in many.why


def test_auto_is_one_where_the_lab_cannot_be_made_into_several(tmp_path: Path) -> None:
    text = LOCAL.read_text().replace("127.0.77.10", "10.9.8.7", 1)
    inv = tmp_path / "lab.yaml"
    inv.write_text(text)
    choice = capacity.auto_parallel(load_inventory(inv), 7, capacity.Machine(8, 0.0, ROOMY), COST)
    assert choice.n == 1
    assert "cannot run several instances" in choice.why


def test_auto_is_one_on_an_adopted_deployment() -> None:
    from runner.spec.inventory import AdoptSpec

    inv = load_inventory(ROOT / "inventories" / "eks.yaml")
    adopted = AdoptSpec(deployment="vllm")
    inv = inv.model_copy(update={"lab": inv.lab.model_copy(update={"adopt": adopted})})
    choice = capacity.auto_parallel(inv, 7, capacity.Machine(8, 0.0, ROOMY), COST)
    assert choice.n == 1 and "adopts a deployment" in choice.why


def test_auto_where_the_memory_is_unknown_counts_the_cores() -> None:
    choice = _auto(2, 0.0, math.inf)
    assert choice.n == 4 and "memory unknown" in choice.why


@pytest.mark.parametrize("kind", [LabKind.LOCAL, LabKind.COMPOSE])
def test_each_kind_on_this_machine_has_a_measured_cost(kind: LabKind) -> None:
    cost = capacity.instance_cost(kind)
    assert cost.by.startswith("bench/instance_cost.py --lab inventories/"), cost.by
    assert 0 < cost.cpu_mean <= cost.cpu_peak < 2
    assert cost.fixed_mib > 0 and cost.per_node_mib > 0
    assert 100 < cost.memory_mib(load_inventory(LOCAL)) < 4096
    assert (ROOT / cost.by.split()[0]).is_file()


def test_a_cluster_kind_has_no_cost_here() -> None:
    from runner.labs.registry import entry

    for kind in LabKind:
        assert (entry(kind).instance_cost is None) is not entry(kind).instances_share_host
    with pytest.raises(ValueError, match="no measured cost"):
        capacity.instance_cost(LabKind.KUBERNETES)


def test_busy_cores_are_a_share_of_the_usable_ones() -> None:
    assert 0.0 <= capacity.busy_cores(0.05) <= capacity.usable_cores()
    assert 0.0 <= capacity.busy_cores(0.05, since=procstat.cpu_mark()) <= capacity.usable_cores()
    assert capacity.mem_available_mib() > 0


def test_the_commands_own_cpu_is_not_counted_as_other_work() -> None:
    # 2 cores over 100 ticks each: 150 busy ticks, 60 of them this process's
    before = procstat.CpuMark(at=0.0, cores=2, busy=1000, total=4000, own=10)
    after = procstat.CpuMark(at=1.0, cores=2, busy=1150, total=4200, own=70)
    assert before.others_busy(after) == pytest.approx(2 * 90 / 200)
    assert before.others_busy(before) == 0.0  # no time between them: nothing known
    spun = procstat.cpu_mark()
    assert spun is not None
    # spin until this process's own ticks count 10 (0.1 s of CPU; seconds of wall time on a
    # machine busy with other work): they never do if `own` is not this process's
    t_end = time.monotonic() + 20
    later = spun
    while later is not None and later.own - spun.own < 10 and time.monotonic() < t_end:
        for _ in range(100_000):
            pass
        later = procstat.cpu_mark()
    assert later is not None and later.own - spun.own >= 10
    assert procstat.STARTED is not None and procstat.STARTED.at <= spun.at


def test_a_watch_already_long_enough_is_not_waited_for() -> None:
    old = procstat.CpuMark(at=time.monotonic() - 5, cores=1, busy=0, total=0, own=0)
    t0 = time.monotonic()
    capacity.busy_cores(0.5, since=old)
    assert time.monotonic() - t0 < 0.4


# the CLI: --parallel alone, auto, a number, and a scenario right after it


def _cli(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    *args: str,
    machine: capacity.Machine = IDLE,
) -> Any:
    import runner.run.suite

    def run_scenario(ls: Any, lab: Any, journal: Any, progress: Any) -> Any:
        return runner.run.suite.skipped(ls, lab)

    monkeypatch.setattr(runner.run.suite, "run_scenario", run_scenario)
    monkeypatch.setattr(runner.run.suite, "open_lab", lambda inv: _IdleLab(inv, tmp_path / "state"))
    monkeypatch.setattr(capacity, "usable_cores", lambda: 2)
    monkeypatch.setattr(capacity, "this_machine", lambda: machine)
    monkeypatch.setattr(capacity, "instance_cost", lambda kind: COST)
    return CliRunner().invoke(
        main, [*args, "--lab", str(LOCAL), "--reports", str(tmp_path / "reports")]
    )


def _ran(tmp_path: Path) -> tuple[int, list[str]]:
    result = json.loads((tmp_path / "reports" / LATEST / "result.json").read_text())
    return result["lab"]["instances"], [s["id"] for s in result["scenarios"]]


@pytest.mark.parametrize("flag", [["--parallel"], ["--parallel", "auto"], ["--parallel=auto"]])
def test_parallel_alone_or_auto_runs_what_the_machine_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: list[str]
) -> None:
    got = _cli(monkeypatch, tmp_path, "run", *THREE, *flag)
    assert got.exit_code == 0, got.output
    assert "--parallel auto: 3 instance(s): 2 usable core(s), 0.0 busy" in got.stderr
    assert "3 scenario(s) apply" in got.stderr
    assert _ran(tmp_path) == (3, THREE)


def test_parallel_with_a_number_runs_that_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _cli(monkeypatch, tmp_path, "run", "--parallel", "3", *THREE)
    assert got.exit_code == 0, got.output
    assert "--parallel auto" not in got.stderr
    assert _ran(tmp_path) == (3, THREE)


def test_a_scenario_right_after_parallel_is_run_not_taken_for_n(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _cli(monkeypatch, tmp_path, "run", "--parallel", *THREE)
    assert got.exit_code == 0, got.output
    assert "--parallel auto: 3 instance(s)" in got.stderr
    instances, ran = _ran(tmp_path)
    assert instances == 3 and sorted(ran) == sorted(THREE)


@pytest.mark.parametrize(
    ("value", "said"),
    [("0", "--parallel must be 1..64 or auto, not 0"), ("bogus", "neither a number, nor auto")],
)
def test_a_parallel_that_is_neither_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, said: str
) -> None:
    got = _cli(monkeypatch, tmp_path, "run", *THREE, "--parallel", value)
    assert got.exit_code == 2, got.output
    assert said in got.stderr


def test_plan_says_what_auto_would_pick_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _cli(monkeypatch, tmp_path, "plan", *THREE)
    assert got.exit_code == 0, got.output
    last = got.stdout.strip().splitlines()[-1]
    assert last == (
        "--parallel auto would run 3 instance(s): 2 usable core(s), 0.0 busy, 2.0 free; one "
        "instance takes 0.40 core on average and 0.80 in its busiest second (measured a test by "
        "tests/unit), so n x 0.40 + 0.40 <= 2.0 holds 4; 64.0 GiB available, 80% of it holds 131 "
        "at 400 MiB each (100 MiB + 60 MiB x 5 nodes); 3 scenario(s) apply"
    )
    as_json = _cli(monkeypatch, tmp_path, "plan", *THREE, "--json")
    assert [p["id"] for p in json.loads(as_json.stdout)] == THREE


def test_plan_on_a_busy_machine_says_the_load_it_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = capacity.Machine(2, 1.3, 2048.0)
    got = _cli(monkeypatch, tmp_path, "plan", *THREE, machine=busy)
    assert got.exit_code == 0, got.output
    last = got.stdout.strip().splitlines()[-1]
    assert last.startswith(
        "--parallel auto would run 1 instance(s): 2 usable core(s), 1.3 busy, 0.7 free; "
    ), last
    assert "so n x 0.40 + 0.40 <= 0.7 holds 1; 2.0 GiB available, 80% of it holds 4 " in last


def test_a_dry_run_says_what_auto_would_pick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _cli(monkeypatch, tmp_path, "run", *THREE, "--dry-run", "--parallel")
    assert got.exit_code == 0, got.output
    assert "--parallel auto would run 3 instance(s)" in got.stdout
    assert not (tmp_path / "reports").exists()
