"""The seven seed scenarios the benchmarks' goal figures are set for. The catalogue (scenarios/)
has grown beyond them; a benchmark over all of it would measure another suite than its goals."""

SEVEN = (
    "context-window-overflow",
    "dhcp-address-change",
    "head-only-restart",
    "kv-cache-shortage",
    "service-name-collision",
    "stray-gpu-process",
    "tp-mismatch",
)
