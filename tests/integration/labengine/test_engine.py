"""The lab engine as a process: launched like `vllm serve`, failing like it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from labengine.logs import traceback_lines
from labengine.tracebacks import Traceback, frames
from vllmfacts.wording import Era

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


def logged(out: str) -> list[str]:
    """Printed lines with the pid and the timestamp taken out:
    `(APIServer) WARNING [model.py:2176] ...`, `(APIServer) Traceback (most recent call last):`."""
    out = re.sub(r"^\((\w+) pid=\d+\) ", r"(\1) ", out, flags=re.MULTILINE)
    return re.sub(r" \d\d-\d\d \d\d:\d\d:\d\d \[", " [", out).splitlines()


def serve_traceback(kind: Traceback, *final: str) -> list[str]:
    """The API server's traceback `kind` as the 0.19 era's data holds it (bench/differential.py
    compares those against real `vllm serve`), ending in the lines `final`."""
    text = "\n".join(traceback_lines(frames(Era.V0_19, kind), "\n".join(final)))
    return [f"(APIServer) {ln}" for ln in text.splitlines()]


def frame_lines(file: str, line: int, function: str, code: str) -> list[str]:
    return [f'(APIServer)   File "{file}", line {line}, in {function}', f"(APIServer)     {code}"]


def under(code: str, part: str) -> str:
    """The caret line Python 3.12 prints under `part` of a frame's source line `code`."""
    return "    " + " " * code.index(part) + "^" * len(part)


def holds(lines: list[str], part: list[str]) -> bool:
    return any(lines[i : i + len(part)] == part for i in range(len(lines)))


VLLM = "/usr/local/lib/python3.12/dist-packages/vllm"
HEADLESS_COMM = "VLLM::Worker_TP1"  # what `ps` shows for rank 1 of a group
PYDANTIC_TAIL = "    For further information visit https://errors.pydantic.dev/2.12/v/value_error"


def test_context_window_overflow_is_a_config_error() -> None:
    p = serve(QWEN, "--max-model-len", "131072", "--host", "127.0.0.1", "--port", str(free_port()))
    assert p.returncode == 1
    expected = serve_traceback(
        Traceback.SERVE_CONFIG,
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        "  Value error, User-specified max_model_len (131072) is greater than the derived "
        "max_model_len (max_position_embeddings=32768.0 or model_max_length=None in model's "
        "config.json). To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with "
        "extreme caution. If the model uses relative position encoding (RoPE), positions "
        "exceeding derived_max_model_len lead to nan. If the model uses absolute position "
        "encoding, positions exceeding derived_max_model_len will cause a CUDA array "
        "out-of-bounds error. [type=value_error, input_value=ArgsKwargs((), {'model': "
        "'Qwen/Qwen2.5-14B-Instruct-AWQ', ...}), input_type=ArgsKwargs]",
        PYDANTIC_TAIL,
    )
    assert logged(p.stdout)[-len(expected) :] == expected
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
    lines = logged(p.stdout)
    assert (
        "(APIServer) WARNING [model.py:2176] User-specified max_model_len (131072) is greater "
        "than the derived max_model_len (max_position_embeddings=32768.0 or model_max_length=None "
        "in model's config.json). VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. "
        "If the model uses relative position encoding (RoPE), positions exceeding "
        "derived_max_model_len lead to nan. If the model uses absolute position encoding, "
        "positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error."
    ) in lines
    # ... and the second wall stops it: Qwen2.5-14B keeps 48 layers x 8 KV heads x 128 x (K, V)
    # x 2 bytes = 192 KiB per token, so 131072 tokens need 24.0 GiB; the A10G at 0.9 leaves
    # 9.1 GiB (the EKS start-failure write-up), about 49,700 tokens, 49,696 in whole 16-token
    # blocks.
    assert (
        "(EngineCore) ValueError: To serve at least one request with the models's max seq len "
        "(131072), (24.0 GiB KV cache is needed, which is larger than the available KV cache "
        "memory (9.1 GiB). Based on the available memory, the estimated maximum model length is "
        "49696. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    ) in lines


def test_tp_mismatch_counts_visible_gpus() -> None:
    port = str(free_port())
    world_error = [
        "  Value error, World size (2) is larger than the number of available GPUs (1) in this "
        "node. If this is intentional and you are using:",
        "- ray, set '--distributed-executor-backend ray'.",
        "- multiprocessing, set '--nnodes' appropriately. [type=value_error, "
        "input_value=ArgsKwargs((), {'tensor_parallel_size': 2, ...}), input_type=ArgsKwargs]",
    ]
    expected = serve_traceback(
        Traceback.SERVE_CONFIG_PARALLEL,
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig",
        *world_error,
        PYDANTIC_TAIL,
    )
    p = serve(QWEN, "-tp", "2", "--host", "127.0.0.1", "--port", port)
    assert p.returncode == 1
    assert logged(p.stdout)[-len(expected) :] == expected
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
    assert p.returncode == 1
    assert logged(p.stdout)[-len(expected) :] == expected


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
    lines = logged(p.stdout)
    assert (
        "(APIServer) WARNING [envs.py:1744] Unknown vLLM environment variable detected: "
        "VLLM_SERVICE_HOST"
    ) in lines
    head = "(EngineCore) ERROR [core.py:1108] "
    err = lines.index(head + "EngineCore failed to start.")
    core = f"{VLLM}/v1/engine/core.py"
    net, executor = f"{VLLM}/utils/network_utils.py", f"{VLLM}/v1/executor"
    otel = f"{VLLM}/tracing/otel.py"
    wrapper = [
        f'  File "{otel}", line 178, in sync_wrapper',
        "    return func(*args, **kwargs)",
        under("return func(*args, **kwargs)", "func(*args, **kwargs)"),
    ]
    spawn = "engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)"
    executor_init = "self.model_executor = executor_class(vllm_config)"
    args_call = "distributed_init_method, rank, local_rank = self._distributed_args()"
    init_method = "distributed_init_method = get_distributed_init_method(get_ip(), get_open_port())"
    start_port = "start_port = start_port if start_port is not None else envs.VLLM_PORT"
    calls = [
        f'  File "{core}", line 1082, in run_engine_core',
        f"    {spawn}",
        under(spawn, spawn.split(" = ")[1]),
        *wrapper,  # EngineCoreProc.__init__ and Executor.__init__ are instrumented
        f'  File "{core}", line 848, in __init__',
        "    super().__init__(",
        f'  File "{core}", line 114, in __init__',
        f"    {executor_init}",
        under(executor_init, "executor_class(vllm_config)"),
        *wrapper,
        f'  File "{executor}/abstract.py", line 103, in __init__',
        "    self._init_executor()",
        f'  File "{executor}/uniproc_executor.py", line 30, in _init_executor',
        f"    {args_call}",
        under(args_call, "self._distributed_args()"),
        f'  File "{executor}/uniproc_executor.py", line 57, in _distributed_args',
        f"    {init_method}",
        under(init_method, "get_open_port()"),
        f'  File "{net}", line 166, in get_open_port',
        "    return _get_open_port()",
        under("return _get_open_port()", "_get_open_port()"),
        f'  File "{net}", line 194, in _get_open_port',
        f"    {start_port}",
        under(start_port, "envs.VLLM_PORT"),
        f'  File "{VLLM}/envs.py", line 1683, in __getattr__',
        "    return environment_variables[name]()",
        under("return environment_variables[name]()", "environment_variables[name]()"),
        f'  File "{VLLM}/envs.py", line 449, in get_vllm_port',
        "    raise ValueError(",
        "ValueError: VLLM_PORT 'tcp://10.100.1.2:8000' appears to be a URI. This may "
        "be caused by a Kubernetes service discovery issue,check the warning in: "
        "https://docs.vllm.ai/en/stable/serving/env_vars.html",
    ]
    # logger.exception puts the record's head on every line; then the process dies re-raising
    n = len(calls)
    assert lines[err + 1 : err + 2 + n] == [head + "Traceback (most recent call last):"] + [
        head + ln for ln in calls
    ]
    assert lines[err + 2 + n : err + 10 + 2 * n] == [
        "(EngineCore) Process EngineCore:",
        "(EngineCore) Traceback (most recent call last):",
        '(EngineCore)   File "/usr/lib/python3.12/multiprocessing/process.py", line 314, '
        "in _bootstrap",
        "(EngineCore)     self.run()",
        '(EngineCore)   File "/usr/lib/python3.12/multiprocessing/process.py", line 108, in run',
        "(EngineCore)     self._target(*self._args, **self._kwargs)",
        f'(EngineCore)   File "{core}", line 1112, in run_engine_core',
        "(EngineCore)     raise e",
    ] + [f"(EngineCore) {ln}" for ln in calls]
    assert lines[-3:] == [
        f'(APIServer)   File "{VLLM}/v1/engine/utils.py", line 1057, in wait_for_engine_startup',
        "(APIServer)     raise RuntimeError(",
        "(APIServer) RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
    ]
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
        # from v0.21 the CUDA-graph estimate (0.79 GiB here) is taken from the budget first,
        # which leaves nothing: "No available memory"; without it, the shortage of the EKS
        # start-failure write-up
        env={"GAMEDAY_VLLM_ERA": "0.33", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"},
    )
    assert p.returncode == 1
    lines = logged(p.stdout)
    # 16384 tokens x 192 KiB = 3.0 GiB; 0.5 of the A10G leaves 0.18 GiB in 0.19 (the EKS
    # start-failure write-up); 0.33 does not count the 181 MiB of cuBLAS handles (it creates
    # them before its memory snapshot):
    # 382,975,040 bytes, less the pool's null block (3 MiB) = 379,829,312 bytes = 0.35 GiB,
    # 120 whole blocks of 16 tokens = 1920
    # 0.33 names the process in its log format only: the record of the failure carries the
    # prefix, what multiprocessing prints when the process dies (stderr, undecorated) does not
    head = "(EngineCore_DP0) ERROR [core.py:1584] "
    err = lines.index(head + "EngineCore failed to start.")
    assert lines[err + 1] == head + "Traceback (most recent call last):"
    died = lines.index("Process EngineCore_DP0:")
    assert died > err and lines[died + 1] == "Traceback (most recent call last):"
    assert lines[-1].startswith("RuntimeError: Engine core initialization failed.")
    assert (
        "ValueError: To serve at least one request with the model's max seq len "
        "(16384), (3.0 GiB KV cache is needed, which is larger than the available KV cache "
        "memory (0.35 GiB). Based on the available memory, the estimated maximum model length is "
        "1920. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU "
        "backend) or decreasing `max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    ) in lines


def test_unknown_flag_exits_2_like_argparse() -> None:
    """As real `vllm serve` 0.19.1 prints it: the leftovers reach vLLM's top-level parser."""
    p = serve(QWEN, "--no-such-flag")
    assert p.returncode == 2
    assert p.stderr == (
        "usage: vllm [-h] [-v]\n"
        "            {chat,complete,serve,launch,bench,collect-env,run-batch} ...\n"
        "vllm: error: unrecognized arguments: --no-such-flag\n"
    )
    assert p.stdout == ""
    p = serve(QWEN, "--no-such-flag", env={"GAMEDAY_VLLM_ERA": "0.33"})
    assert p.stderr.splitlines()[1:] == [
        "            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,"
        "run-batch,snapshot}",
        "            ...",
        "vllm: error: unrecognized arguments: --no-such-flag",
    ]


def test_a_bad_value_is_reported_by_serve() -> None:
    p = serve(QWEN, "--port", "abc")
    assert p.returncode == 2
    assert p.stderr == (
        "usage: vllm serve [model_tag] [options]\n"
        "vllm serve: error: argument --port: invalid int value: 'abc'\n"
    )


def test_unknown_model() -> None:
    p = serve("nobody/no-such-model", "--host", "127.0.0.1", "--port", str(free_port()))
    assert p.returncode == 1
    assert logged(p.stdout)[-6:] == [
        "(APIServer) ValueError: Invalid repository ID or local directory specified: "
        "'nobody/no-such-model'.",
        "(APIServer) Please verify the following requirements:",
        "(APIServer) 1. Provide a valid Hugging Face repository ID.",
        "(APIServer) 2. Specify a local directory that contains a recognized configuration file.",
        "(APIServer)    - For Hugging Face models: ensure the presence of a 'config.json'.",
        "(APIServer)    - For Mistral models: ensure the presence of a 'params.json'.",
    ]


def test_port_in_use() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = serve(QWEN, "--host", "127.0.0.1", "--port", str(port))
    assert p.returncode == 1
    expected = serve_traceback(Traceback.SERVE_BIND, "OSError: [Errno 98] Address already in use")
    assert logged(p.stdout)[-len(expected) :] == expected
    # vLLM binds in setup_server, which otel instruments
    wrapper = frame_lines(
        f"{VLLM}/tracing/otel.py", 178, "sync_wrapper", "return func(*args, **kwargs)"
    )
    setup = frame_lines(
        f"{VLLM}/entrypoints/openai/api_server.py",
        550,
        "setup_server",
        "sock = create_server_socket(sock_addr)",
    )
    assert holds(expected, [*wrapper, "(APIServer)            ^^^^^^^^^^^^^^^^^^^^^", *setup])


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
    expected = serve_traceback(
        Traceback.SERVE_ENVIRON,
        "ValueError: Unknown vLLM environment variable detected: VLLM_SERVICE_HOST",
    )
    assert logged(p.stdout)[-len(expected) :] == expected
    # the check runs while the engine config is built, under the event loop
    assert holds(
        expected,
        frame_lines(
            f"{VLLM}/engine/arg_utils.py",
            1530,
            "create_engine_config",
            "envs.validate_environ(self.fail_on_environ_validation)",
        ),
    )
    assert (
        '(APIServer)   File "uvloop/loop.pyx", line 1515, in uvloop.loop.Loop.run_until_complete'
        in expected
    )


def sigterm_once(logged: str, *args: str, comm: str | None = None) -> tuple[int, str]:
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
        if comm is not None:  # the line is logged before the process takes its name
            deadline = time.monotonic() + 10
            while Path(f"/proc/{proc.pid}/comm").read_text().strip() != comm[:15]:
                assert time.monotonic() < deadline, f"the process never took the name {comm!r}"
                time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=5)
    finally:
        proc.kill()
    return proc.returncode, seen + out


def test_sigterm_while_a_head_waits_for_its_group() -> None:
    """vLLM's setup_server: SIGTERM while initialising raises KeyboardInterrupt("terminated")
    (vllm#15997), so a head that is a container's PID 1 still obeys `docker stop`."""
    code, out = sigterm_once(
        "DP group leader", "--node-rank", "0", "--host", "127.0.0.1", "--port", str(free_port())
    )
    assert code == 130
    expected = serve_traceback(Traceback.SERVE_TERMINATED, "KeyboardInterrupt: terminated")
    assert expected[-3:-1] == frame_lines(
        f"{VLLM}/entrypoints/openai/api_server.py",
        558,
        "signal_handler",
        'raise KeyboardInterrupt("terminated")',
    )
    assert logged(out)[-len(expected) :] == expected


def test_sigterm_ends_a_headless_node() -> None:
    """vLLM's run_headless: a signal ends the node with SystemExit (exit 0); its multi-node
    path leaves the worker monitor without a word. Its own lines are undecorated (0.19 bare)."""
    code, out = sigterm_once(
        "headless multiproc executor", "--node-rank", "1", "--headless", comm=HEADLESS_COMM
    )
    assert code == 0
    lines = logged(out)
    assert "Shutting down." not in "\n".join(lines)
    launch = next(ln for ln in lines if "headless multiproc executor" in ln)
    assert launch.startswith("INFO [serve.py:193] Launching vLLM (v0.19.1) headless")
    assert lines[-1] == launch
