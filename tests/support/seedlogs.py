"""Log excerpts from the operations write-ups (the EKS start-failure and DeepGEMM crash
write-ups) and from runtimes, shared by the tests that read them."""

# kubectl logs --previous excerpts as the EKS start-failure write-up shows them (vLLM 0.19.1), one
# line per record
SEED_019 = {
    "kv-cache-shortage": """\
(EngineCore pid=81) INFO 04-19 10:59:54 [gpu_worker.py:436] Available KV cache memory: 0.18 GiB
(EngineCore pid=81) ERROR 04-19 10:59:54 [core.py:1108] EngineCore failed to start.
(EngineCore pid=81) ValueError: To serve at least one request with the models's max seq len (16384), (3.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.18 GiB). Based on the available memory, the estimated maximum model length is 976. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
""",
    "context-window-overflow": """\
(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
(APIServer pid=1)   Value error, User-specified max_model_len (131072) is greater than the derived max_model_len (max_position_embeddings=32768.0 or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan.
""",
    "tp-mismatch": """\
(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig
(APIServer pid=1)   Value error, World size (2) is larger than the number of available GPUs (1) in this node. If this is intentional and you are using:
(APIServer pid=1) - ray, set '--distributed-executor-backend ray'.
(APIServer pid=1) - multiprocessing, set '--nnodes' appropriately.
""",
    "service-name-collision": """\
(APIServer pid=1) WARNING 04-19 10:45:24 [envs.py:1744] Unknown vLLM environment variable detected: VLLM_SERVICE_HOST
(EngineCore pid=81) ERROR 04-19 10:45:43 [core.py:1108] EngineCore failed to start.
(EngineCore pid=81) ValueError: VLLM_PORT 'tcp://10.100.123.45:8000' appears to be a URI. This may be caused by a Kubernetes service discovery issue,check the warning in: https://docs.vllm.ai/en/stable/serving/env_vars.html
""",
}


HEALTHY = """\
(EngineCore pid=81) INFO 04-19 10:50:43 [kv_cache_utils.py:1319] GPU KV cache size: 49,696 tokens
(APIServer pid=1) INFO 04-19 10:50:50 [launcher.py:37] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Application startup complete.
"""


CONTAINER = """\
2026-04-19T01:59:50.100000000Z (EngineCore pid=81) ERROR 04-19 01:59:50 [core.py:935] EngineCore encountered a fatal error.
2026-04-19T01:59:50.200000000Z (APIServer pid=1) INFO:     Finished server process [1]
"""


HOST = """\
2026-04-18 17:02:11 kernel: NVRM: nvAssertOkFailedNoLog: NV_ERR_NO_MEMORY
2026-04-19 10:59:49 dockerd: container vllm_glm53 health status: healthy
2026-04-19 11:05:00 cron: daily backup started
"""
