"""Red team, round 5: what the trainer spends on a hostile completion outside the sandbox, and what a run leaves.

A quadratic parse of the source on the trainer's GIL, untagged lines on the event channel, a run's tmpfs kept alive
in a Unix-socket cycle after the run, the code task's cache holding every source whole, page tables outside
``memory_mb``, and disk reads at the disk's whole bandwidth.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import sys
import time
from pathlib import Path

import pytest

from tasks import sandbox_cgroup
from tasks.code import RUNS, parses, sandbox_results
from tasks.sandbox import run_tests
from tasks.sandbox_grading import defined_names
from tests.tasks.test_sandbox_redteam import ADD_TESTS, CORRECT_ADD, limits, sandbox  # noqa: F401 - fixtures

FSTRING_BOMB = "def add(a, b):\n    return a + b\nX = f'" + "{1}" * 66_000 + "'\n"
"""~198 kB: CPython's parser takes ~4 s of CPU on it (quadratic in the fields), under ``max_completion_chars``."""


def trainer_cpu() -> float:
    """CPU time of this process, every thread (the reward workers') included; not its children's."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_a_quadratic_parse_costs_the_trainer_little_cpu():
    started = trainer_cpu()
    parses(FSTRING_BOMB), defined_names(FSTRING_BOMB)
    assert trainer_cpu() - started < 0.3
    honest = CORRECT_ADD + "".join(f"def helper_{i}(x):\n    return x + {i}\n" for i in range(400))
    assert len(honest) > 8_000 and parses(honest) and {"add", "helper_399"} <= defined_names(honest)


def test_the_code_tasks_cache_keeps_a_digest_of_the_code_not_the_code(sandbox, limits):
    source = CORRECT_ADD + "# " + "x" * 20_000 + "\n"
    result, = sandbox_results([f"```python\n{source}```"], [ADD_TESTS], sandbox, limits, workers=1)
    assert result.status == "passed"
    assert RUNS.entries and not any(source in map(str, key) for key in RUNS.entries)


NEWLINE_FLOOD = """
import os, sys
os.set_blocking(int(sys.orig_argv[-1]), True)
os.write(int(sys.orig_argv[-1]), b"\\n" * (1 << 20))
"""
NEWLINE_TRICKLE = """
import os, sys, threading, time
def pace():
    end = time.monotonic() + 2
    while time.monotonic() < end:
        os.write(int(sys.orig_argv[-1]), b"\\n"); time.sleep(0.00005)
threads = [threading.Thread(target=pace) for _ in range(4)]
for thread in threads: thread.start()
for thread in threads: thread.join()
"""


def test_untagged_lines_on_the_event_channel_end_the_run_at_once(sandbox, limits):
    for prelude in (NEWLINE_FLOOD, NEWLINE_TRICKLE):
        started = trainer_cpu()
        result = run_tests(prelude + CORRECT_ADD, ADD_TESTS, sandbox, limits)
        assert result.status == "no_verdict" and "untagged" in result.error, result
        assert trainer_cpu() - started < 0.3


TMPFS_CYCLE = """
import array, os, socket
fd = os.open("/tmp/blob", os.O_CREAT | os.O_RDWR)
for _ in range(12):
    os.write(fd, b"x" * (1 << 20))
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
a.sendmsg([b"f"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
a.sendmsg([b"s"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]))])
os.close(fd)
a.close()
import time; time.sleep(0.3)
b.close()
"""


def shmem_mb() -> int:
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) >> 10 for line in meminfo if line.startswith("Shmem:"))


def test_a_runs_tmpfs_cannot_be_kept_in_a_unix_socket_cycle(sandbox, limits):
    """Such a cycle lasted, unprompted, until another process on the host passed a descriptor; since round 17 no
    descriptor can be sent at all (``sendmsg`` is refused), and the run's tmpfs goes with it (three tries)."""
    for _ in range(3):
        before = shmem_mb()
        result = run_tests(TMPFS_CYCLE + CORRECT_ADD, ADD_TESTS, sandbox,
                           dataclasses.replace(limits, disk_mb=16, file_size_mb=16))
        assert result.status == "error" and "PermissionError" in str(result.error), result
        deadline = time.monotonic() + 2
        while shmem_mb() - before >= 8 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert shmem_mb() - before < 8


PAGE_TABLES = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
for i in range(1, 65_000):  # one read-only page in each 1 GiB region: ~8 KiB of page tables per 4 KiB mapped
    address = (i << 30) + (1 << 44)
    if libc.mmap(address, 4096, 1, 0x22 | 0x100000, -1, 0) != address:
        break
    ctypes.c_char.from_address(address).value
"""


def test_page_tables_are_capped_by_the_runs_memory_cgroup(sandbox, limits):
    """~490 MB of page tables at memory_mb 256 before, outside every rlimit; the run's cgroup caps them too."""
    found = next((item for item in sandbox_cgroup.hierarchies() if item.memory), None)
    if found is None:
        pytest.skip("no per-run memory cgroup here (the trainer is not root, or its cgroup may have no children)")
    result = run_tests(PAGE_TABLES + CORRECT_ADD, ADD_TESTS, sandbox, limits)
    assert result.status == "memory_limit", result
    assert not [name for name in os.listdir(found.parent) if name.startswith(f"mmgrpo-sandbox-{os.getpid()}-")]
    with open("/proc/sys/kernel/pid_max") as pid_max:
        dead = int(pid_max.read()) + 1  # no process has it
    os.mkdir(os.path.join(found.parent, f"mmgrpo-sandbox-{dead}-0"))  # left by a trainer killed mid-run
    sandbox_cgroup.sweep(found.parent)
    assert not os.path.exists(os.path.join(found.parent, f"mmgrpo-sandbox-{dead}-0"))


COLD_READS = """
import time
def cold_reads(path, seconds):
    started, total = time.monotonic(), 0
    with open(path, "rb", buffering=0) as library:  # its pages were dropped from the cache: each read reaches the disk
        while time.monotonic() - started < seconds:
            chunk = library.read(1 << 20)
            if not chunk:
                break
            total += len(chunk)
    return total / (time.monotonic() - started)
"""


def test_disk_reads_are_throttled_by_the_runs_io_cgroup(sandbox, limits):
    """A bound library read from the disk, its pages first dropped from the host's cache: at the disk's speed
    before (~1.9 GB/s with ``O_DIRECT``, refused since), the run's I/O cgroup holds it to ``read_mb_per_second``."""
    if not any(item.io for item in sandbox_cgroup.hierarchies()):
        pytest.skip("no per-run I/O cgroup here (the trainer is not root, or its cgroup may have no children)")
    library = next((path for path in sorted(Path(sys.base_prefix).rglob("*.so*")) if path.stat().st_size >= 64 << 20),
                   None)
    if library is None:
        pytest.skip("no bound library of 64 MB or more to read")
    with open(library, "rb") as cached:
        os.posix_fadvise(cached.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    throttled = dataclasses.replace(limits, wall_seconds=20, cpu_seconds=10, read_mb_per_second=16)
    rate = run_tests(COLD_READS, [f"rate = cold_reads({str(library)!r}, 2)\nassert 0 < rate < 24 * 2 ** 20, rate"],
                     sandbox, throttled)
    assert rate.status == "passed", rate
