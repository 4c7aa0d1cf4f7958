"""Lines the lab engine prints on PyTorch's behalf: the caching allocator's out-of-memory
message, with its sizes and the device's processes as PyTorch writes them."""

from __future__ import annotations

from labengine.pytorch import GIB, KIB, MIB, cuda_oom, format_size


def test_sizes_as_format_size_writes_them() -> None:
    assert [format_size(n) for n in (0, KIB, KIB + 1, MIB, MIB + 1, GIB, GIB + 1)] == [
        "0 bytes",
        "1024 bytes",
        "1.00 KiB",
        "1024.00 KiB",
        "1.00 MiB",
        "1024.00 MiB",
        "1.00 GiB",
    ]


def test_every_process_on_the_device_is_named() -> None:
    msg = cuda_oom(
        alloc=3 * GIB,
        total=22 * GIB,
        free=500 * MIB,
        procs=[(77, 1417 * MIB), (4242, 20 * GIB)],
        allocated=19 * GIB,
        reserved=19 * GIB,
        self_pid=4242,
    )
    assert msg.startswith(
        "CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 22.00 GiB "
        "of which 500.00 MiB is free. Process 77 has 1.38 GiB memory in use. Including "
        "non-PyTorch memory, this process has 20.00 GiB memory in use. Of the allocated memory "
        "19.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
    )
