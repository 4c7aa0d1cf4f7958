"""What an engine process imports: every engine of the lab is a new `vllm-lab` process, so its
imports are paid at every start and restart of every node of every instance."""

from __future__ import annotations

import subprocess
import sys


def test_an_engine_process_imports_no_pydantic_nor_http_client_unless_it_needs_them() -> None:
    """Every engine process of the lab builds `vllm-lab`'s parser: the proxy's HTTP client and
    the KV-transfer config's pydantic are paid for only by the command and flag that use them."""
    code = (
        "import sys, labengine.cli, labengine.apiserver, labengine.core; "
        "from vllmfacts.wording import Era; [labengine.cli.build_parser(e) for e in Era]; "
        "print(sorted(m for m in ('pydantic', 'httpx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
