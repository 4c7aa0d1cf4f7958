"""The lab engine as a process: launched like `vllm serve`, failing like it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"


def serve(
    *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    e |= {"GAMEDAY_TIME_SCALE": "1000"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "labengine", "serve", *args],
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_context_window_overflow_is_a_config_error() -> None:
    p = serve(QWEN, "--max-model-len", "131072", "--host", "127.0.0.1", "--port", str(free_port()))
    assert p.returncode == 1
    assert (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig"
        in p.stdout
    )
    assert (
        "(max_position_embeddings=32768.0 or model_max_length=None in model's config.json)"
        in p.stdout
    )
    assert "(EngineCore" not in p.stdout
    assert all(line.startswith("(APIServer pid=") for line in p.stdout.splitlines())


def test_bypass_variable_turns_the_error_into_a_warning() -> None:
    p = serve(
        QWEN,
        "--max-model-len",
        "131072",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"},
    )
    assert p.returncode == 1
    assert "WARNING" in p.stdout and "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set" in p.stdout
    assert "(24.0 GiB KV cache is needed" in p.stdout  # ... and the second wall stops it


def test_tp_mismatch_counts_visible_gpus() -> None:
    port = str(free_port())
    p = serve(QWEN, "-tp", "2", "--host", "127.0.0.1", "--port", port)
    assert p.returncode == 1
    assert (
        "World size (2) is larger than the number of available GPUs (1) in this node." in p.stdout
    )
    # two GPUs installed, one visible: still one
    p = serve(
        QWEN,
        "-tp",
        "2",
        "--host",
        "127.0.0.1",
        "--port",
        port,
        env={"GAMEDAY_GPU_COUNT": "2", "CUDA_VISIBLE_DEVICES": "1"},
    )
    assert "available GPUs (1)" in p.stdout


def test_vllm_port_uri_fails_in_engine_core() -> None:
    p = serve(
        QWEN,
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        env={"VLLM_PORT": "tcp://10.100.1.2:8000", "VLLM_SERVICE_HOST": "10.100.1.2"},
    )
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    assert any(
        "WARNING" in ln and "Unknown vLLM environment variable detected: VLLM_SERVICE_HOST" in ln
        for ln in lines
    )
    err = next(i for i, ln in enumerate(lines) if "EngineCore failed to start." in ln)
    assert lines[err].startswith("(EngineCore pid=")
    assert any(
        "ValueError: VLLM_PORT 'tcp://10.100.1.2:8000' appears to be a URI. This may be "
        "caused by a Kubernetes service discovery issue,check the warning in: "
        "https://docs.vllm.ai/en/stable/serving/env_vars.html" in ln
        for ln in lines[err:]
    )
    assert "Failed core proc(s): {'EngineCore_DP0': 1}" in p.stdout
    assert "Loading weights took" not in p.stdout


def test_era_033_wording() -> None:
    p = serve(
        QWEN,
        "--gpu-memory-utilization",
        "0.5",
        "--max-model-len",
        "16384",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        env={"GAMEDAY_VLLM_ERA": "0.33"},
    )
    assert "(EngineCore_DP0 pid=" in p.stdout
    assert "with the model's max seq len (16384)" in p.stdout
    assert "estimated maximum model length is 960" in p.stdout


def test_unknown_flag_exits_2_like_argparse() -> None:
    p = serve(QWEN, "--no-such-flag")
    assert p.returncode == 2 and "unrecognized arguments: --no-such-flag" in p.stderr


def test_unknown_model() -> None:
    p = serve("nobody/no-such-model", "--host", "127.0.0.1", "--port", str(free_port()))
    assert p.returncode == 1
    assert "Invalid repository ID or local directory specified: 'nobody/no-such-model'" in p.stdout


def test_port_in_use() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = serve(QWEN, "--host", "127.0.0.1", "--port", str(port))
    assert p.returncode == 1 and "Address already in use" in p.stdout


def test_fail_on_environ_validation() -> None:
    p = serve(
        QWEN,
        "--fail-on-environ-validation",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        env={"VLLM_SERVICE_HOST": "x"},
    )
    assert p.returncode == 1
    assert "ValueError: Unknown vLLM environment variable detected: VLLM_SERVICE_HOST" in p.stdout


def sigterm_once(logged: str, *args: str) -> tuple[int, str]:
    """Start `vllm-lab serve ARGS` in a 2-node group, SIGTERM it once it has logged `logged`;
    its exit code and everything it printed."""
    group = ["Qwen/Qwen2.5-14B-Instruct-AWQ", "--tensor-parallel-size", "2", "--nnodes", "2",
             "--master-addr", "127.0.0.1", "--master-port", str(free_port())]  # fmt: skip
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "labengine", "serve", *group, *args],
        env=e | {"GAMEDAY_TIME_SCALE": "1000"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        seen = ""
        while logged not in seen:
            line = proc.stdout.readline()
            assert line, f"{logged!r} never logged: {seen[-2000:]}"
            seen += line
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=5)
    finally:
        proc.kill()
    return proc.returncode, seen + out


def test_sigterm_while_a_head_waits_for_its_group() -> None:
    """vLLM's setup_server: SIGTERM while initialising raises KeyboardInterrupt("terminated")
    (vllm#15997), so a head that is a container's PID 1 still obeys `docker stop`."""
    code, out = sigterm_once(
        "to join the group", "--node-rank", "0", "--host", "127.0.0.1", "--port", str(free_port())
    )
    assert code == 130
    assert "KeyboardInterrupt: terminated" in out


def test_sigterm_ends_a_headless_node() -> None:
    """vLLM's run_headless: a signal ends the node with SystemExit, and it says so."""
    code, out = sigterm_once("headless multiproc executor", "--node-rank", "1", "--headless")
    assert code == 0
    assert "Shutting down." in out
