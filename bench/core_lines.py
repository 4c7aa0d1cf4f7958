"""engine-core-death's line table against vLLM's own source: the lines of
vllm/v1/engine/core.py that log "EngineCore encountered a fatal error." in each release.

    python bench/core_lines.py [--from 0.8.5] [--to VERSION] [--cache DIR]

The triage entry "the engine core's fatal-error traceback ... by the line of vLLM's code it is
logged from" reads a traceback cut above its message by the `[core.py:N]` its record's head
carries. N must be a line that logs the death in some release and no other exception in any
release (a failed start, a failed utility call, a request's failed pre-processing), or a cut
start-up failure would read as a death. This script takes core.py from every final release on
PyPI in the range (the wheel's one file, read with HTTP range requests from the wheel's zip:
a few hundred KiB a release instead of the whole wheel; pip downloads whole wheels only),
parses it with `ast` (nothing of vLLM is imported), finds each logger.exception call (and
logger.error with exc_info) and its message, and compares the lines it derives with the
entry's regex in scenarios/engine-core-death.yaml. Each release's core.py is cached.

Prints each release's fatal-error and failed-start lines, then the lines the entry lacks and
those it has without cause; exit 1 if either is not empty (a new release moved its lines: put
the printed set into the entry).
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import re
import sys
import zipfile
from pathlib import Path
from urllib.parse import urljoin

import httpx
import yaml

INDEX = "https://pypi.org/pypi/vllm/json"
CORE = "vllm/v1/engine/core.py"
SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "engine-core-death.yaml"
ENTRY = "the engine core's fatal-error traceback, by the line of core.py that logs it"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gameday" / "core-py"
FATAL = "EngineCore encountered a fatal error"
FAILED_START = "EngineCore failed to start"
FINAL = re.compile(r"^\d+(?:\.\d+){1,3}$")  # no rc, dev or post releases


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


class RangeFile(io.RawIOBase):
    """A remote file read by HTTP range requests, for zipfile to seek in."""

    def __init__(self, client: httpx.Client, url: str) -> None:
        head = client.head(url, follow_redirects=True)
        head.raise_for_status()
        self.client, self.url = client, str(head.url)
        self.size, self.pos = int(head.headers["content-length"]), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        if self.pos >= self.size:
            return 0
        end = min(self.pos + len(buf), self.size) - 1
        r = self.client.get(self.url, headers={"Range": f"bytes={self.pos}-{end}"})
        r.raise_for_status()
        data = r.content
        buf[: len(data)] = data
        self.pos += len(data)
        return len(data)


def releases(client: httpx.Client, lo: str, hi: str | None) -> dict[str, str]:
    """Each final release in [lo, hi] and the address of one of its x86_64 (or pure) wheels."""
    r = client.get(INDEX)
    r.raise_for_status()
    out = {}
    for version, files in r.json()["releases"].items():
        if not FINAL.match(version) or version_key(version) < version_key(lo):
            continue
        if hi and version_key(version) > version_key(hi):
            continue
        wheels = [f["url"] for f in files if f["filename"].endswith(".whl")]
        wheels = [u for u in wheels if "x86_64" in u or "none-any" in u] or wheels
        if wheels:
            out[version] = urljoin(INDEX, wheels[0])
    return dict(sorted(out.items(), key=lambda kv: version_key(kv[0])))


def core_py(client: httpx.Client, version: str, url: str, cache: Path) -> str | None:
    path = cache / f"{version}.py"
    if not path.exists():
        with zipfile.ZipFile(io.BufferedReader(RangeFile(client, url), 1 << 16)) as zf:
            if CORE not in zf.namelist():
                return None
            cache.mkdir(parents=True, exist_ok=True)
            path.write_bytes(zf.read(CORE))
    return path.read_text(encoding="utf-8")


def exception_calls(source: str) -> list[tuple[int, str]]:
    """(line, first argument's text) of each logger.exception call, and of each logger.error
    call with exc_info: the calls whose records carry a traceback, line by line."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        traced = method == "exception" or (
            method == "error" and any(k.arg == "exc_info" for k in node.keywords)
        )
        if not traced:
            continue
        first = node.args[0] if node.args else None
        text = first.value if isinstance(first, ast.Constant) else ast.unparse(first or node)
        calls.append((node.lineno, str(text)))
    return calls


def entry_lines() -> set[int]:
    doc = yaml.safe_load(SCENARIO.read_text(encoding="utf-8"))
    for item in doc["triage"]:
        for pat in item.get("in_order", []):
            if pat.get("description") == ENTRY:
                m = re.search(r"core\\\.py:\(\?:([\d|]+)\)", pat["regex"])
                if m:
                    return {int(n) for n in m.group(1).split("|")}
    raise SystemExit(f"{SCENARIO}: no triage entry described {ENTRY!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="lo", default="0.8.5")
    ap.add_argument("--to", dest="hi", default=None)
    ap.add_argument("--cache", type=Path, default=CACHE)
    args = ap.parse_args()
    fatal: dict[int, list[str]] = {}
    other: dict[int, list[str]] = {}
    with httpx.Client(follow_redirects=True, timeout=60) as client:
        found = releases(client, args.lo, args.hi)
        print(f"{'release':<10} fatal error at          failed start at")
        for version, url in found.items():
            source = core_py(client, version, url, args.cache)
            if source is None:
                print(f"{version:<10} (no {CORE})")
                continue
            calls = exception_calls(source)
            deaths = sorted(n for n, text in calls if FATAL in text)
            starts = sorted(n for n, text in calls if FAILED_START in text)
            for n, text in calls:
                (fatal if FATAL in text else other).setdefault(n, []).append(version)
            print(f"{version:<10} {', '.join(map(str, deaths)):<23} {', '.join(map(str, starts))}")
    derived = {n for n in fatal if n not in other}
    clashes = sorted(n for n in fatal if n in other)
    have = entry_lines()
    missing, extra = sorted(derived - have), sorted(have - derived)
    print(f"\n{len(found)} releases; {len(derived)} lines log only the death")
    print(f"left out (another exception logs from them too): {clashes}")
    print(f"the entry lacks: {missing}")
    print(f"the entry has without cause: {extra}")
    if missing or extra:
        print(f"\nthe lines for the entry: {'|'.join(map(str, sorted(derived)))}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
