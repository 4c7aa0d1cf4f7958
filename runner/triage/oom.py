"""A CUDA out-of-memory error whose own list of the GPU's processes shows that others hold it.

PyTorch's caching allocator words its out-of-memory error (PyTorch 2.1 on) as "CUDA out of
memory. Tried to allocate X. GPU N has a total capacity of T of which F is free. <processes>
Of the allocated memory A is allocated by PyTorch, and R is reserved by PyTorch but
unallocated." The processes are NVML's list of every process with a context on that GPU
(c10/cuda/CUDACachingAllocator.cpp reportProcessMemoryInfo): "Process P has U memory in use. "
for each, and "Including non-PyTorch memory, this process has U memory in use. " for the one
whose pid is the allocator's own. 2.1's message spells "capacty". Sizes are format_size's:
bytes, KiB, MiB or GiB.

So the message says who holds the memory. Where processes other than the failing one hold at
least `SHARE` of the GPU, the failure is theirs as much as its own: a stranger on the GPU (a
second server, a notebook, a job left behind), which a lower batch or a smaller context only
works around. Inside a container NVML's pids are the host's, so no entry is "this process" and
the failing process is listed as another: there, the entry whose use is closest above what
PyTorch holds (allocated plus reserved; the difference is the CUDA context and libraries'
memory) is taken for the failing process, the likeliest reading rather than the most cautious
one; where no entry is that large, the failing process is not listed. The message is read up to
what PyTorch holds, which ends the list: a paste cut before it does not tell which entry is
whose, and the largest is taken for the failing process, so that what the others hold is the
least it can be (whichever entry is the failing one, the rest hold at least that). A message
wrapped over more than runner.triage.match's MAX_SPAN lines is not read.

Not every such message is the neighbours' doing. Where NVML cannot tell a process's use (WSL2's
WDDM driver) PyTorch prints the unknown value, 2^64 - 1 bytes, as 17179869184.00 GiB: a list
with an entry above the GPU's capacity, or adding up to more than it, is not read. A process
capped by torch.cuda.set_per_process_memory_fraction says "X allowed; " before what PyTorch
holds and fails with the GPU's memory free: the cap refused it, so such a message is not read,
and nor is one whose free memory would have held the allocation.

PyTorch before 2.1 lists no processes: "CUDA out of memory. Tried to allocate X (GPU N; T total
capacity; A already allocated; F free; R reserved in total by PyTorch)" (1.x's caching
allocator, "cached" for "reserved" before 1.4). What is neither free nor PyTorch's is held by
other processes or by this one outside PyTorch (its CUDA context, cuBLAS and NCCL: a few hundred
MiB to a GiB or two); at `OLD_SHARE` of the GPU or more it is taken for other processes'.
Either message is read from "Tried to allocate", where a writer quoted it without its start.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from runner.triage.match import Evidence, Log, find

SHARE = 0.25  # of the GPU's total capacity, held by other processes
MIN_OTHERS = 1 << 30  # and at least 1 GiB

_SIZE = r"[\d.]+ (?:bytes|KiB|MiB|GiB)"
OOM = (
    r"(?:CUDA out of memory\. )?Tried to allocate (?P<tried>" + _SIZE + r")\. "
    r"GPU (?P<gpu>\d+) has a total capac(?:i)?ty of (?P<total>" + _SIZE + r") of which "
    r"(?P<free>" + _SIZE + r") is free\. "
    r"(?P<procs>(?:(?:Process \d+|Including non-PyTorch memory, this process) has "
    + _SIZE
    + r" memory in use\. ?)+)(?:(?P<allowed>"
    + _SIZE
    + r") allowed; )?Of the allocated memory (?P<allocated>"
    + _SIZE
    + r") is allocated by PyTorch, (?:with "
    + _SIZE
    + r" allocated in private pools \(e\.g\., CUDA Graphs\), )?and (?P<reserved>"
    + _SIZE
    + r") is reserved by PyTorch but unallocated"
)
# the same message where the paste ends in its list (an entry cut short) or in the sentence
# after it
CUT_OOM = (
    OOM[: OOM.index("(?:(?P<allowed>")]
    + r"(?:Of the allocated memory(?: [\d.]*)?|(?:Process|Including)[^.]{0,60})?\s*$"
)
HELD = "other processes hold the GPU's memory (PyTorch's out-of-memory error lists them)"
OLD_SHARE = 0.5  # of the GPU, neither free nor PyTorch's, where the message lists no processes
OLD_OOM = (
    r"(?:CUDA out of memory\. )?Tried to allocate (?P<tried>" + _SIZE + r") \(GPU (?P<gpu>\d+); "
    r"(?P<total>" + _SIZE + r") total capacity; (?P<allocated>" + _SIZE + r") already "
    r"allocated; (?P<free>" + _SIZE + r") free; (?:(?P<allowed>" + _SIZE + r") allowed; )?"
    r"(?P<reserved>" + _SIZE + r") (?:reserved in total by PyTorch|cached)\)"
)
OLD_HELD = "memory neither free nor PyTorch's holds most of the GPU (other processes)"

# what other processes hold by one reading of the message, or None where it says none do
Reading = Callable[[dict[str, str]], int | None]

_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
# the lines joined without their spaces (match.loose) run a size into its unit
_SIZE_RX = re.compile(r"([\d.]+) ?(bytes|KiB|MiB|GiB)")
_PROC = re.compile(
    r"(Process ?\d+|Including ?non-PyTorch ?memory, ?this ?process) ?has ?"
    r"([\d.]+ ?(?:bytes|KiB|MiB|GiB))"
)


def _bytes(size: str) -> int | None:
    m = _SIZE_RX.fullmatch(size.strip())
    if m is None:
        return None
    try:
        return int(float(m.group(1)) * _UNITS[m.group(2)])
    except ValueError:
        return None


def _procs(captures: dict[str, str]) -> list[tuple[bool, int]] | None:
    """The message's list: (is this process, bytes in use) for each entry, or None where an
    entry's size does not read."""
    out = []
    for who, size in _PROC.findall(captures.get("procs", "")):
        b = _bytes(size)
        if b is None:
            return None
        out.append((who.startswith("Including"), b))
    return out


def others_hold(captures: dict[str, str]) -> int | None:
    """The bytes processes other than the failing one hold, by the message's own list (None
    where it is empty): where no entry is "this process", the entry closest above what PyTorch
    holds is taken for the failing one, or the largest where the paste lost what PyTorch
    holds."""
    used = _procs(captures)
    if not used:
        return None
    if any(own for own, _ in used):
        return sum(b for own, b in used if not own)
    a, r = _bytes(captures.get("allocated", "")), _bytes(captures.get("reserved", ""))
    if a is None or r is None:
        # the paste cut before what PyTorch holds: whichever entry is the failing process, the
        # others hold at least all but the largest
        return sum(b for _, b in used) - max(b for _, b in used)
    holds = a + r
    # the failing process listed under its host pid: the closest use at or above its own hold
    # (none at or above it: it is not listed)
    fits = [i for i, (_, b) in enumerate(used) if b >= holds]
    if fits:
        mine = min(fits, key=lambda i: used[i][1] - holds)
        return sum(b for i, (_, b) in enumerate(used) if i != mine)
    return sum(b for _, b in used)


def _refused(captures: dict[str, str]) -> int | None:
    """The GPU's total capacity, where the message shows the allocation refused for want of
    memory: None where a per-process cap refused it ("X allowed; ") or the free memory would
    have held it."""
    total = _bytes(captures.get("total", ""))
    tried, free = _bytes(captures.get("tried", "")), _bytes(captures.get("free", ""))
    if not total or tried is None or free is None or captures.get("allowed") or free >= tried:
        return None
    return total


def _listed_others(captures: dict[str, str]) -> int | None:
    """What other processes hold by the list, where that is `SHARE` of the GPU or more."""
    total, used = _refused(captures), _procs(captures)
    if total is None or used is None or sum(b for _, b in used) > total:
        return None  # NVML could not tell the uses (WSL2): an entry, or all, above the GPU
    others = others_hold(captures)
    return others if others is not None and others >= max(MIN_OTHERS, SHARE * total) else None


def _unexplained_others(captures: dict[str, str]) -> int | None:
    """An older message's memory neither free nor PyTorch's, where that is `OLD_SHARE` of the
    GPU or more."""
    total = _refused(captures)
    free, reserved = _bytes(captures.get("free", "")), _bytes(captures.get("reserved", ""))
    if total is None or free is None or reserved is None:
        return None
    rest = total - free - reserved
    return rest if rest >= max(2 * MIN_OTHERS, OLD_SHARE * total) else None


def _accepting(held: Reading) -> Callable[[dict[str, str]], bool]:
    return lambda captures: held(captures) is not None


def find_held_by_others(log: Log) -> list[Evidence] | None:
    """The first out-of-memory error whose list shows other processes holding at least `SHARE`
    of the GPU, or an older message whose memory neither free nor PyTorch's is `OLD_SHARE` of
    it, with how much they hold among its captures (`others`, in GiB)."""
    # the whole messages first; a paste cut in the list or after it only where none is read
    rounds: tuple[tuple[tuple[str, str, Reading], ...], ...] = (
        ((OOM, HELD, _listed_others), (OLD_OOM, OLD_HELD, _unexplained_others)),
        ((CUT_OOM, HELD, _listed_others),),
    )
    hits = []
    for readings in rounds:
        for regex, description, held in readings:
            hit = find(log, regex, description, accept=_accepting(held))
            if hit is not None:
                hits.append((hit[1], held(hit[1].captures) or 0))
        if hits:
            break
    if not hits:
        return None
    ev, others = min(hits, key=lambda h: h[0].number)
    held_gib = f"{others / (1 << 30):.2f} GiB"
    return [Evidence(ev.description, ev.lines, {**ev.captures, "others": held_gib})]
