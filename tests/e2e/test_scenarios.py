"""The start-up scenarios and a request-time one, end to end on the embedded local lab."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.cli import ROOT, gameday, inventory, scenario_variant

pytestmark = pytest.mark.e2e
STARTUP = [
    "scenarios/context-window-overflow.yaml",
    "scenarios/kv-cache-shortage.yaml",
    "scenarios/tp-mismatch.yaml",
    "scenarios/service-name-collision.yaml",
    "scenarios/tp-head-divisibility.yaml",
    "scenarios/lora-rank-over-max.yaml",
    "scenarios/cuda-graph-capture-oom.yaml",
]


def test_the_startup_scenarios_pass(tmp_path: Path) -> None:
    p = gameday("run", *STARTUP, "--lab", "inventories/local.yaml", "--reports", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    run_dir = (tmp_path / "latest").resolve()
    for f in ("result.json", "junit.xml", "report.md", "report.html"):
        assert (run_dir / f).is_file()
    result = json.loads((run_dir / "result.json").read_text())
    by_id = {s["id"]: s for s in result["scenarios"]}
    assert all(s["verdict"] == "passed" for s in by_id.values())
    # the walls in order: config errors in seconds, the KV shortage only after the weights load
    assert by_id["context-window-overflow"]["time_to_fail_s"] < 30
    assert by_id["tp-mismatch"]["time_to_fail_s"] < 30
    assert by_id["tp-head-divisibility"]["time_to_fail_s"] < 30
    assert 90 < by_id["kv-cache-shortage"]["time_to_fail_s"] < 300
    # the adapter is loaded only once the engine is up: after the KV cache and the graphs
    assert 90 < by_id["lora-rank-over-max"]["time_to_fail_s"] < 400
    assert 90 < by_id["cuda-graph-capture-oom"]["time_to_fail_s"] < 330  # after the KV check
    assert all(s["time_to_recover_s"] for s in by_id.values())
    collision = by_id["service-name-collision"]
    assert any("local lab emulation" in n for n in collision["notes"])
    names = [a["name"] for a in by_id["context-window-overflow"]["assertions"]]
    assert any("does NOT restore" in n for n in names)


def test_wrong_expectations_fail_readably(tmp_path: Path) -> None:
    files = [
        scenario_variant(
            tmp_path,
            "scenarios/tp-mismatch.yaml",
            "wrong-exit-code",
            ("exit_code: 1", "exit_code: 0"),
        ),
        scenario_variant(
            tmp_path,
            "scenarios/context-window-overflow.yaml",
            "wrong-signature",
            (
                "'ValidationError: 1 validation error for ModelConfig'",
                "'ValidationError: 7 validation errors for CacheConfig'",
            ),
        ),
        scenario_variant(
            tmp_path,
            "scenarios/kv-cache-shortage.yaml",
            "too-tight",
            ("time_to_fail: {min_s: 90, max_s: 300}", "time_to_fail: {max_s: 20}"),
        ),
    ]
    p = gameday(
        "run",
        *map(str, files),
        "--lab",
        "inventories/local.yaml",
        "--reports",
        str(tmp_path / "reports"),
    )
    assert p.returncode == 1, p.stdout + p.stderr
    out = p.stdout
    assert "Traceback" not in out + p.stderr
    assert re.search(
        r"FAILED wrong-exit-code: expect: exit code\s+expected: exit code 0\s+"
        r"observed: exit code 1",
        out,
    )
    assert re.search(
        r"FAILED wrong-signature: expect: signature 1/2.*\s+expected: "
        r"/ValidationError: 7 validation errors for CacheConfig/\s+observed: not found",
        out,
    )
    assert re.search(
        r"FAILED too-tight: expect: time to fail\s+expected: 0-20 s real.*\s+"
        r"observed: \d+\.\d s real",
        out,
    )
    result = json.loads(next((tmp_path / "reports").glob("*/result.json")).read_text())
    assert {s["verdict"] for s in result["scenarios"]} == {"failed"}


def test_pytest_plugin_collects_and_explains(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = scenario_variant(
        tmp_path, "scenarios/tp-mismatch.yaml", "plugin-wrong", ("exit_code: 1", "exit_code: 0")
    )
    inv = inventory(tmp_path, "127.0.78.20")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            str(ROOT / "scenarios" / "tp-mismatch.yaml"),
            str(bad),
            "--lab",
            str(inv),
            "-q",
            "--rootdir",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "1 failed, 1 passed" in p.stdout, p.stdout + p.stderr
    assert "expected: exit code 0" in p.stdout and "observed: exit code 1" in p.stdout


def test_a_stalled_rank_takes_its_group_down_by_two_timeouts(tmp_path: Path) -> None:
    """The head gives up on its workers at VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (300 s), the
    workers' NCCL watchdog at the process group's 600 s, in PyTorch's own words."""
    p = gameday(
        "run",
        "scenarios/nccl-watchdog-timeout.yaml",
        "--lab",
        "inventories/local.yaml",
        "--reports",
        str(tmp_path),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    result = json.loads(((tmp_path / "latest").resolve() / "result.json").read_text())
    (sc,) = result["scenarios"]
    assert sc["verdict"] == "passed"
    assert 290 <= sc["time_to_fail_s"] <= 360
    observed = {a["name"]: a["observed"] for a in sc["assertions"]}
    # 300 s after the head, the process group's 600 s from the stalled request
    after = float(observed["expect on node3: within 400 s"].split()[0])
    assert 250 < after < 350, after
    # c10's date is month * 100 + day, never zero-padded
    line = observed["expect on node3: signature 2/3: and takes the process down"]
    assert re.search(r"\[rank2\]:\[E[1-9]\d{2,3} ", line), line
    assert [a["verdict"] for a in sc["assertions"] if a["phase"] == "recover"] == [
        "passed",
        "passed",
    ]


def test_engine_core_death_on_the_stand_in_and_not_where_the_node_restarts_always(
    tmp_path: Path,
) -> None:
    """The lab engine handles its engine core's death as vLLM does (exit 0, the policy never
    fires), and its hang too (/health 200, nothing completes, nothing logged); on the shipped
    local lab, whose serving node restarts always, the death is not run."""
    inv = inventory(
        tmp_path, "127.0.75.10", **{"gameday_restart: always": "gameday_restart: on-failure"}
    )
    death = "scenarios/engine-core-death.yaml"
    hang = "scenarios/engine-core-hang.yaml"
    p = gameday("run", death, hang, "--lab", str(inv), "--reports", str(tmp_path / "r1"))
    assert p.returncode == 0, p.stdout + p.stderr
    result = json.loads(((tmp_path / "r1" / "latest").resolve() / "result.json").read_text())
    sc, hung = result["scenarios"]
    assert sc["verdict"] == "passed"
    assert sc["time_to_fail_s"] < 60
    # the probes tell the two apart: 503 and an exit there, 200 and a hang here
    observed = {a["name"]: a["observed"] for a in hung["assertions"]}
    assert hung["verdict"] == "passed"
    assert observed["expect: GET /health"] == "HTTP 200"
    assert observed["expect: inference (chat) hangs"].startswith("probe error: timed out, a hang")
    assert observed["expect: state of serving"].startswith("running, restarts 0")
    p = gameday("run", death, "--lab", "inventories/local.yaml", "--reports", str(tmp_path / "r2"))
    assert p.returncode == 0, p.stdout + p.stderr
    result = json.loads(((tmp_path / "r2" / "latest").resolve() / "result.json").read_text())
    (sc,) = result["scenarios"]
    assert sc["verdict"] == "skipped"
    assert "serving restarts by policy always" in sc["notes"][0]


def test_a_model_without_a_chat_template_serves_completions_and_refuses_chat(
    tmp_path: Path,
) -> None:
    """A failure only a chat request shows: /health and completions pass, chat is refused with
    vLLM's 400, and the flag the start-up log names does not bring chat back."""
    scen = "scenarios/missing-chat-template.yaml"
    p = gameday("run", scen, "--lab", "inventories/local.yaml", "--reports", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    result = json.loads(((tmp_path / "latest").resolve() / "result.json").read_text())
    (sc,) = result["scenarios"]
    assert sc["verdict"] == "passed"
    seen = {a["name"]: a["observed"] for a in sc["assertions"]}
    assert seen["expect: GET /health"] == "HTTP 200"
    assert seen["expect: inference (completions)"].startswith("HTTP 200")
    refusal = seen["expect: inference (chat) refused"]
    assert refusal.startswith("HTTP 400: ") and '"type":"BadRequestError"' in refusal
    (shortcut,) = [v for k, v in seen.items() if "does NOT restore" in k]
    assert "inference (chat): HTTP 400" in shortcut
    assert "inference (completions): HTTP 200" in shortcut
