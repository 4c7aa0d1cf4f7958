"""Triage of three failures a scenario's run signature does not quote: a stray GPU process at
start-up (vLLM's free-memory check), a hung engine core read from its stats lines, and an
engine's death pasted without its cause (the scenarios' `triage` entries)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from runner.cli.main import main
from runner.spec.expectations import TriageSignature
from runner.spec.scenario import discover, load_scenario
from runner.triage import Finding, RecoverySource, triage
from runner.triage.cause import shows_cause
from runner.triage.match import Log
from runner.triage.normalise import normalise

ROOT = Path(__file__).resolve().parents[3]
SCEN = [load_scenario(p) for p in discover([ROOT / "scenarios"])]

TAIL = "Decrease GPU memory utilization or reduce GPU memory used by other processes.\n"
# vllm/v1/worker/gpu_worker.py init_device, 0.9.2 to 0.12.0: no device in the message
FREE_0102 = (
    "ValueError: Free memory on device (20.41/22.3 GiB) on startup is less than desired GPU "
    "memory utilization (0.95, 21.19 GiB). " + TAIL
)
# vllm/v1/worker/utils.py request_memory, 0.14.0 on: torch.device's name
FREE_019 = FREE_0102.replace("on device (", "on device cuda:0 (")
# 0.33.0's with the weights held by another process (utils.py request_memory)
FREE_EXTERNAL = (
    "ValueError: Free memory on device cuda:0 (12.0/22.3 GiB) on startup is less than the "
    "engine's budget after excluding external process's weights (0.9, 13.07 GiB). " + TAIL
)
# the profiling line that starts the same way, and is no failure (gpu_worker.py)
PROFILE = (
    "Free memory on device (21.93/22.3 GiB) on startup. Desired GPU memory utilization is "
    "(0.9, 20.07 GiB). Actual usage is 9.38 GiB for weight, 1.41 GiB for peak activation.\n"
)


def only(text: str) -> Finding:
    [f] = triage(text, SCEN)
    return f


def ids(text: str) -> list[str]:
    return [f.scenario.scenario.metadata.id for f in triage(text, SCEN)]


@pytest.mark.parametrize("message", [FREE_0102, FREE_019, FREE_EXTERNAL])
def test_each_wording_of_the_start_up_check_names_the_stranger(message: str) -> None:
    f = only(message)
    assert f.scenario.scenario.metadata.id == "stray-gpu-process"
    assert f.sightings[0].when == "at start-up, the stranger already on the GPU"
    assert "request_memory" in (f.sightings[0].note or "")
    assert not f.cut


def test_the_profiling_line_is_no_failure() -> None:
    assert triage(PROFILE, SCEN) == []


def test_the_advice_says_who_holds_the_memory_and_what_fits() -> None:
    advice = only(FREE_019).advice
    assert advice[0].startswith(
        "another process holds GPU memory: 1.89 GiB of the device's 22.3 GiB was in use"
    )
    assert "nvidia-smi --query-compute-apps=pid,process_name,used_memory" in advice[0]
    assert advice[1].startswith("stop that process")
    # 20.41 / 22.3 = 0.915: the utilisation that fits, rounded down
    assert advice[2].startswith("--gpu-memory-utilization 0.91 would fit the free memory")
    assert "CUDA error 800" in advice[2]


def test_on_unified_memory_the_advice_names_the_hosts_memory_first() -> None:
    # a GB10's GPU memory is the host's RAM: the host's programs and file cache hold it too
    advice = only("INFO Detected NVIDIA GB10 (DGX Spark)\n" + FREE_019).advice
    assert advice[0].startswith("this device's GPU memory is the host's RAM (unified memory")
    assert "drop_caches" in advice[0]
    assert advice[1].startswith("another process holds GPU memory")
    # a discrete GPU's advice starts with the other process, as above
    assert not any("unified memory" in a for a in only(FREE_019).advice)


def test_figures_no_check_could_refuse_give_no_numbers() -> None:
    enough = FREE_019.replace("(20.41/22.3 GiB)", "(21.5/22.3 GiB)")
    assert only(enough).advice == (
        "no numeric advice: the log's 21.5 GiB free is not below its 21.19 GiB budget and its "
        "22.3 GiB total",
    )


def stats(
    prompt: float = 0.0,
    gen: float = 0.0,
    running: int = 2,
    kv: float = 4.1,
    engine: str = "Engine 000: ",
) -> str:
    """V1's stats line (vllm/v1/metrics/loggers.py LoggingStatLogger.log)."""
    return (
        f"INFO 11-29 07:12:00 [loggers.py:259] {engine}Avg prompt throughput: {prompt:.1f} "
        f"tokens/s, Avg generation throughput: {gen:.1f} tokens/s, Running: {running} reqs, "
        f"Waiting: 0 reqs, GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 0.0%\n"
    )


def test_three_stalled_intervals_are_a_hang_two_are_not() -> None:
    assert triage(stats(gen=30.0) + stats() * 2, SCEN) == []
    f = only(stats(gen=30.0) + stats() * 3)
    assert f.scenario.scenario.metadata.id == "engine-core-hang"
    assert [e.number for e in f.sightings[0].evidence] == [2, 3, 4]
    assert f.advice[0].startswith("2 request(s) running and not one token made over 3 stats")


def test_a_longer_stall_quotes_its_first_three_and_its_last_line() -> None:
    f = only(stats() * 7)
    assert [e.number for e in f.sightings[0].evidence] == [1, 2, 3, 7]
    assert "over 7 stats lines" in f.advice[0]


@pytest.mark.parametrize(
    "lines",
    [
        [stats(running=0)] * 6,  # an idle server
        [stats(gen=12.5)] * 6,  # a generating one
        [stats(prompt=800.0)] * 6,  # prefills
        [stats(kv=4.0 + k) for k in range(6)],  # a long prefill filling its KV cache
        [stats(), stats(), stats(gen=3.0), stats(), stats()],  # tokens in between
    ],
)
def test_a_working_or_idle_engine_is_no_hang(lines: list[str]) -> None:
    assert triage("".join(lines), SCEN) == []


def test_each_engine_and_each_pod_counts_its_own_lines() -> None:
    # engine 1 stalls while engine 0 works: one engine's lines in a row
    mixed = "".join(stats(gen=9.0) + stats(engine="Engine 001: ") for _ in range(3))
    assert ids(mixed) == ["engine-core-hang"]
    # two pods with two stalled lines each are no pod with four
    two = "".join(f"[pod/vllm-{k % 2}/vllm] " + stats() for k in range(4))
    assert triage(two, SCEN) == []


def test_releases_wordings_of_the_stats_line() -> None:
    # 0.7.3: no engine prefix; V0 (vllm/engine/metrics.py): Swapped and Pending, a full stop
    assert ids(stats(engine="") * 3) == ["engine-core-hang"]
    v0 = (
        "INFO 03-11 16:40:02 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 0.0 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV "
        "cache usage: 3.1%, CPU KV cache usage: 0.0%.\n"
    )
    assert ids(v0 * 3) == ["engine-core-hang"]


def test_a_health_check_answered_during_the_stall_is_quoted() -> None:
    health = '(APIServer pid=1) INFO:     10.0.0.5:40112 - "GET /health HTTP/1.1" 200 OK\n'
    f = only(stats() + health + stats() * 2)
    assert [e.description for e in f.sightings[0].evidence][1] == "/health still answers 200"


FATAL = (
    "(EngineCore pid=81) ERROR 11-29 07:30:02 [core.py:1110] EngineCore encountered a fatal "
    "error.\n(EngineCore pid=81) ERROR 11-29 07:30:02 [core.py:1110] Traceback (most recent "
    "call last):\n"
)
DEAD = (
    "(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
    "issue. See stack trace (above) for the root cause.\n"
)


def test_the_fatal_error_without_its_cause_is_said_cut() -> None:
    f = only(FATAL)
    assert f.scenario.scenario.metadata.id == "engine-core-death"
    assert (f.cut, f.sightings[0].cut) == (True, "cause")
    # the API server's wrapper is not the cause
    assert only(FATAL + DEAD.replace("Error: ", "Error: x ")).cut
    caused = FATAL + "(EngineCore pid=81) torch.AcceleratorError: CUDA error: an illegal memory\n"
    assert not only(caused).cut


@pytest.mark.parametrize(
    "line",
    [
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.",
        "AsyncEngineDeadError: Task finished unexpectedly. This should never happen! Please open",
        "MQEngineDeadError: Engine loop is not running. Inspect the stacktrace to find the",
    ],
)
def test_the_v0_engines_death_is_named_and_said_cut(line: str) -> None:
    f = only(line + "\n")
    assert (f.scenario.scenario.metadata.id, f.cut) == ("engine-core-death", True)


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=1) ERROR 11-29 07:40:11 [core_client.py:668] Engine core proc "
        "EngineCore_DP0 died unexpectedly, shutting down client.",
        "(APIServer pid=1) WARNING 12-01 16:20:04 [core_client.py:840] [shutdown] MPClient: "
        "engine core exited unexpectedly; starting cleanup",
    ],
)
def test_a_process_that_exited_is_named_with_where_its_cause_is(line: str) -> None:
    # a process killed from outside logs no cause: not cut, the advice says where to look
    f = only(line + "\n")
    assert (f.scenario.scenario.metadata.id, f.cut) == ("engine-core-death", False)
    assert f.advice[0].startswith("the paste shows no root cause")
    assert "dmesg" in f.advice[0]


LONE = (
    "ERROR 11-29 07:40:11 [core_client.py:668] Engine core proc EngineCore_DP0 died "
    "unexpectedly, shutting down client.\n"
)


@pytest.mark.parametrize(
    "context",
    [
        "INFO 11-29 07:31:02 [api_server.py:1896] vLLM API server version 0.10.2\n",
        'INFO:     10.0.0.7:51234 - "POST /v1/completions HTTP/1.1" 200 OK\n',
        "$ vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000\n",
        "INFO:     Application shutdown complete.\n",
    ],
)
def test_the_engine_core_death_line_counts_beside_the_api_servers_lines(context: str) -> None:
    assert ids(LONE) == []  # an offline script's exit prints it too (only_with)
    assert ids(context + LONE) == ["engine-core-death"]
    assert ids(LONE + context) == ["engine-core-death"]  # before it or after it


def test_the_runs_own_signature_wins_over_the_triage_entries() -> None:
    # the whole death (EngineDeadError) is the run's signature, which head-only-restart's head
    # shares; its lone line gets the advice
    f, _head = triage(DEAD, SCEN)
    assert [s.when for s in f.sightings] == [None]
    assert f.advice[0].startswith("the paste shows no root cause")
    f, _head = triage("RuntimeError: boom\n" + DEAD, SCEN)
    assert f.advice == ()


def test_shows_cause() -> None:
    def log(text: str) -> Log:
        return Log(normalise(text))

    assert not shows_cause(log(DEAD))
    assert not shows_cause(log("RuntimeError('Engine process (pid 412) died.')\n"))
    assert shows_cause(log("ERROR 11-29 07:00:01 [core.py:1] ValueError: bad\n"))


def test_a_triage_entry_has_patterns_or_a_stall_not_both() -> None:
    with pytest.raises(ValidationError, match="one of in_order, stalled_stats, text_check or"):
        TriageSignature(when="w", note="n")
    with pytest.raises(ValidationError, match="one of in_order, stalled_stats, text_check or"):
        TriageSignature.model_validate(
            {"when": "w", "note": "n", "in_order": [{"regex": "x"}], "stalled_stats": 3}
        )


def test_the_view_and_json_say_when_and_the_cut(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(FATAL)
    out = CliRunner().invoke(main, ["triage", str(log)]).output
    assert "  the paste is cut before the root cause" in out
    assert "  seen in the engine core's own words (V1): The engine core logs" in out
    [entry] = json.loads(CliRunner().invoke(main, ["triage", "--json", str(log)]).output)
    [view] = entry["findings"][0]["views"]
    assert (view["when"], view["cut"], view["releases_note"]) == (
        "in the engine core's own words (V1)",
        "cause",
        None,
    )
    assert view["when_note"].startswith("The engine core logs")


def test_tgis_shard_death_brings_tgis_recovery_not_vllms_exit_0() -> None:
    text = "2025-12-01T09:30:02.114Z ERROR text_generation_launcher: Shard 1 crashed\n"
    (f,) = triage(text, SCEN)
    assert f.scenario.scenario.metadata.id == "engine-core-death"
    assert f.recovery_source == "lines"
    assert any("launcher exits 1" in x for x in f.fixes)
    assert not any("exit 0 is a success to on-failure" in x for x in f.shortcuts)


def test_sglangs_child_death_and_the_watchdogs_status_line_bring_their_own_steps() -> None:
    text = (
        "[2026-03-02 09:14:11] SIGQUIT received. signum=None, frame=None. It usually means one"
        " child failed.\n"
    )
    (f,) = triage(text, SCEN)
    assert (f.scenario.scenario.metadata.id, f.recovery_source) == ("engine-core-death", "lines")
    assert any("0 where it runs as its container's PID 1" in x for x in f.fixes)
    status = (
        ROOT / "tests" / "data" / "triage" / "nccl-failure-detected-peer-exited.log"
    ).read_text()
    (f,) = triage(status, SCEN)
    assert (f.scenario.scenario.metadata.id, f.recovery_source) == (
        "nccl-watchdog-timeout",
        "lines",
    )
    assert any("a peer that died" in x for x in f.fixes)


def test_an_engines_death_wrapper_comes_after_the_failure_that_killed_it() -> None:
    # the API server's wrapper is logged first, the watchdog's timeout (ProcessGroupNCCL.cpp's
    # checkTimeout wording) after it, yet the watchdog is what took the engine down
    text = (
        "ERROR 05-08 20:24:09 serving.py:120] Error generating stream: Background loop has "
        "errored already.\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1196, OpType=GATHER, NumelIn=12000, NumelOut=12000, "
        "Timeout(ms)=600000) ran for 600073 milliseconds before timing out.\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:583] [Rank 0] To avoid data inconsistency, we are "
        "taking the entire process down.\n"
    )
    found = triage(text, SCEN)
    ids = [f.scenario.scenario.metadata.id for f in found]
    assert ids == ["nccl-watchdog-timeout", "engine-core-death"]
    assert [f.wrapper for f in found] == [False, True]
    # alone, the wrapper is the finding
    assert [f.scenario.scenario.metadata.id for f in triage(text.split("\n")[0], SCEN)] == [
        "engine-core-death"
    ]


def test_a_failure_after_the_run_ended_is_no_cause_of_the_death() -> None:
    # the engine died with its own cause; the server was started again and the next start met
    # another process on the GPU: the death is listed first, as it came first
    text = (
        "INFO 03-02 10:00:00 [api_server.py:1] vLLM API server version 0.19.1\n"
        "INFO 03-02 10:05:00 [loggers.py:1] Avg prompt throughput: 10.0 tokens/s\n"
        "(EngineCore pid=81) ERROR 03-02 10:06:00 [core.py:935] EngineCore encountered a fatal "
        "error.\n"
        "(EngineCore pid=81) torch.AcceleratorError: CUDA error: an illegal memory access was "
        "encountered\n"
        "INFO 03-02 10:07:00 [api_server.py:1] vLLM API server version 0.19.1\n"
        "ValueError: Free memory on device cuda:0 (2.0/22.3 GiB) on startup is less than desired "
        "GPU memory utilization (0.9, 20.07 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.\n"
    )
    ids = [f.scenario.scenario.metadata.id for f in triage(text, SCEN)]
    assert ids == ["engine-core-death", "stray-gpu-process"]


def test_an_abort_comes_after_the_gpu_that_caused_it_and_not_across_a_restart() -> None:
    served = 'INFO:     10.0.0.5:41000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    abort = (
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  CUDA error: unspecified launch failure\n"
    )
    xid = (
        "[ 8812.551204] NVRM: Xid (PCI:0000:3b:00): 79, pid=2211, name=python3, GPU has fallen "
        "off the bus.\n"
    )
    ids = [f.scenario.scenario.metadata.id for f in triage(served + abort + xid, SCEN)]
    assert ids == ["gpu-xid-error", "engine-core-death"]
    # stopped, then started again: an abort while the next start loads weights is no death
    load = abort.replace("CUDA error: unspecified launch failure", "weight file not found")
    restarted = served + "INFO:     Shutting down\nINFO:     Finished server process [1]\n" + load
    assert triage(restarted, SCEN) == []
    assert [f.scenario.scenario.metadata.id for f in triage(served + load, SCEN)] == [
        "engine-core-death"
    ]


# vLLM 0.33's NIXL connector: the handshake's failure line (the run's signature), then the
# traceback of what the handshake raised (nixl/base_worker.py _log_failure, _nixl_handshake)
SETUP_FAILED = (
    "(EngineCore_DP0 pid=611) ERROR 09-30 16:44:18 [base_worker.py:1383] NIXL transfer failure: "
    "handshake_setup_failed | Context: {'failure_type': 'handshake_setup_failed', 'request_id': "
    "None, 'engine_id': 'e-decode', 'remote_engine_id': 'e-prefill'}\n"
)
MISMATCH = (
    "(EngineCore_DP0 pid=611) RuntimeError: NIXL compatibility hash mismatch. Local: 3e0b5a9c, "
    "Remote: 7c94d0e2. Prefill and decode instances have incompatible configurations.\n"
)


def test_a_line_naming_another_cause_brings_its_recovery_beside_the_runs_signature() -> None:
    f = only(SETUP_FAILED + MISMATCH)
    assert f.scenario.scenario.metadata.id == "pd-kv-handshake"
    assert [s.when is None for s in f.sightings] == [True, False]
    assert f.recovery_source is RecoverySource.LINES
    assert "--kv-transfer-config" in f.fixes[0]


def test_the_runs_signature_alone_keeps_the_scenarios_recovery() -> None:
    f = only(SETUP_FAILED)
    assert f.recovery_source is RecoverySource.SCENARIO
    assert f.fixes == ("Set the prefill's side-channel host to its service name and restart it",)


def test_names_cause_needs_patterns_and_recover_steps() -> None:
    base = {"when": "w", "note": "n", "names_cause": True}
    with pytest.raises(ValidationError, match="names_cause"):
        TriageSignature.model_validate(base | {"in_order": [{"regex": "x"}]})
    with pytest.raises(ValidationError, match="names_cause"):
        TriageSignature.model_validate(base | {"stalled_stats": 3, "recover": ["r"]})
    with pytest.raises(ValidationError, match="do not apply to it"):
        TriageSignature.model_validate(
            base | {"in_order": [{"regex": "x"}], "recover": ["r"], "after_cause": True}
        )
    assert TriageSignature.model_validate(base | {"in_order": [{"regex": "x"}], "recover": ["r"]})


def test_the_cause_is_named_beside_a_triage_entrys_reading_of_the_handshake_too() -> None:
    typed = "NIXL transfer failure: handshake_setup_failed `RuntimeError`\n"
    f = only(typed + MISMATCH)
    assert [s.names_cause for s in f.sightings] == [False, True]
    assert f.recovery_source is RecoverySource.LINES


def test_a_cause_logged_in_an_earlier_run_names_nothing_of_a_later_failure() -> None:
    restart = (
        "(APIServer pid=702) INFO 09-30 16:50:01 [api_server.py:1896] vLLM API server version "
        "0.33.0\n"
    )
    f = only(MISMATCH + restart + SETUP_FAILED)
    assert [s.names_cause for s in f.sightings] == [False]
    assert f.recovery_source is RecoverySource.SCENARIO
