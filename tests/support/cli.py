"""The CLI in a child process, inventory variants, and the Docker engine or a skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the built-in catalogue's ids (scenarios/), in the order `gameday list` gives them
SHIPPED = [
    "context-window-overflow",
    "cuda-graph-capture-oom",
    "dhcp-address-change",
    "engine-core-death",
    "engine-core-hang",
    "gpu-xid-error",
    "head-only-restart",
    "kv-cache-shortage",
    "lora-rank-over-max",
    "missing-chat-template",
    "nccl-watchdog-timeout",
    "pd-kv-handshake",
    "service-name-collision",
    "silent-wrong-output",
    "stray-gpu-process",
    "tp-head-divisibility",
    "tp-mismatch",
]


def gameday(
    *args: str, timeout: float = 600, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process; `env` adds to (or overrides) this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ | (env or {}),
    )


def variant(source: Path, tmp_path: Path, replace: dict[str, str], name: str | None = None) -> Path:
    """A copy of an inventory in tmp_path with each `old` text replaced by its `new` (each must be
    there); relative paths in it must be made absolute through `replace`."""
    text = source.read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    p = tmp_path / (name or source.name)
    p.write_text(text)
    return p


KUBE_GROUP_MARK = "    # seeds/000's 4-node tensor-parallel group"


def kube_serving_only(tmp_path: Path, name: str = "kube-serving.yaml") -> Path:
    """inventories/kube-testserver.yaml without its 4-node group (one serving pod, as tests of a
    single engine want), its kubeconfig path made absolute."""
    text = (ROOT / "inventories" / "kube-testserver.yaml").read_text().split(KUBE_GROUP_MARK)[0]
    kubeconfig = str(ROOT / "build" / "kubeapi" / "kubeconfig")
    p = tmp_path / name
    p.write_text(text.replace("../build/kubeapi/kubeconfig", kubeconfig))
    return p


def inventory(tmp_path: Path, address: str, **replace: str) -> Path:
    """The local lab's inventory, its serving node on `address`, under the lab name `test`."""
    base = {"127.0.77.10": address, "name: local": "name: test"}
    local = ROOT / "inventories" / "local.yaml"
    return variant(local, tmp_path, base | replace, name="inventory.yaml")


def ok(p: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """`p`, which must have exited 0 (its exit code and stderr in the failure otherwise)."""
    assert p.returncode == 0, f"`gameday {' '.join(p.args[3:])}` exited {p.returncode}: {p.stderr}"
    return p


def not_passed(p: subprocess.CompletedProcess[str]) -> str:
    """What a `run --json` that did not pass says: each scenario not passed with its assertions
    not passed, then stderr's progress lines (the JSON's evidence would crowd them out)."""
    lines = [f"`gameday {' '.join(p.args[3:])}` exited {p.returncode}"]
    try:
        result = json.loads(p.stdout)
    except ValueError:
        return "\n".join([*lines, p.stdout[-3000:], p.stderr[-3000:]])
    for s in result.get("scenarios", []):
        if s["verdict"] == "passed":
            continue
        lines.append(f"{s['id']}: {s['verdict']}")
        lines += [
            f"  {a['verdict']}: {a['name']}: expected {a['expected']}; observed {a['observed']}"
            for a in s["assertions"]
            if a["verdict"] != "passed"
        ]
    return "\n".join([*lines, p.stderr[-3000:]])


def no_engine(exc: BaseException) -> bool:
    """Whether the failure is that no Docker engine listens: its socket missing, or refusing
    connections (docker's own error wraps requests', which wraps urllib3's, which holds the OS
    error among its arguments)."""
    todo, seen = [exc], set()
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, FileNotFoundError | ConnectionRefusedError):
            return True
        todo += [x for x in (e.__cause__, e.__context__, *e.args) if isinstance(x, BaseException)]
    return False


def docker_or_skip() -> Any:
    """A client of the Docker engine; a skip when there is none (outside CI), a failure for
    anything else that goes wrong."""
    import docker

    try:
        client = docker.from_env(timeout=10)
    except docker.errors.DockerException as exc:
        if not no_engine(exc):
            raise
        if os.environ.get("GAMEDAY_REQUIRE_DOCKER") == "1":
            pytest.fail(f"Docker is required here (GAMEDAY_REQUIRE_DOCKER=1) but: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    client.ping()
    return client


REALVLLM_ENV = ROOT / ".venv-vllm"


def realvllm_or_skip() -> Path:
    """The real-vLLM environment (`make realvllm-env`); a skip when it is not set up (outside
    CI), a failure where it must be (GAMEDAY_REQUIRE_REALVLLM=1)."""
    if not (REALVLLM_ENV / ".gameday-complete").is_file():
        why = f"no real-vLLM environment at {REALVLLM_ENV} (make realvllm-env)"
        if os.environ.get("GAMEDAY_REQUIRE_REALVLLM") == "1":
            pytest.fail(f"real vLLM is required here (GAMEDAY_REQUIRE_REALVLLM=1) but: {why}")
        pytest.skip(why)
    return REALVLLM_ENV


def scenario_variant(tmp_path: Path, src: str, new_id: str, *edits: tuple[str, str]) -> Path:
    """A copy of the shipped scenario `src` under the id `new_id`, each `old` text replaced (once)
    by its `new` (each must be there): a scenario made wrong on purpose."""
    text = (ROOT / src).read_text().replace(f"id: {Path(src).stem}", f"id: {new_id}")
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    p = tmp_path / f"{new_id}.yaml"
    p.write_text(text)
    return p
