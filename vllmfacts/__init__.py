"""vLLM's own facts, shared by the runner and the lab engine: the wording of each release
(eras), env names, `vllm serve`'s flags, memory arithmetic, GPU types and the simulated GPU's
shared state, model tables, and the start-up phases its log reveals.

Both `runner` and `labengine` import it; it imports neither.
"""
