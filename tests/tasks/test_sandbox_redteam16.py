"""Red team, round 16 (default configuration, no read throttle): an answer of a deque whose maxlen is wider than a C
integer made the trainer's decoder raise OverflowError, which escaped ``run_tests`` when the line came again while the
run was being closed, before its processes were killed and its cgroup removed (they outlived the run); and one
``writev`` into stdout of a thousand pieces from cold pages of host libraries held the pipe's lock, and the trainer's
read of it, 14-27 s past a 5 s wall clock. The channels are Unix socket pairs now, and any line the trainer cannot read
ends the run."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tasks.sandbox import SandboxLimits, run_tests
from tests.tasks.test_sandbox_redteam import limits, sandbox  # noqa: F401 - fixtures
from tests.tasks.test_sandbox_redteam11 import own_cgroups

FORGES_A_WIDE_MAXLEN_UNTIL_KILLED = r'''
import sys, time
def add(a, b):
    frame = sys._getframe(1)  # the child program's main(): its emit() writes tagged event lines
    emit, index = frame.f_locals["emit"], frame.f_locals["index"]
    while True:  # never returns: the line comes again while the run is closed
        emit({"i": index, "value": {"dqm": [2 ** 70, []]}})
        time.sleep(0.05)
'''

RETURNS_A_DEQUE_CLAIMING_A_WIDE_MAXLEN = '''
import collections
class Wide(collections.deque):
    @property
    def maxlen(self):
        return 2 ** 70
def make():
    return Wide([1])
'''


def test_an_answer_the_trainer_cannot_decode_ends_the_run_and_never_the_trainer(sandbox, limits):
    started = time.monotonic()
    result = run_tests(FORGES_A_WIDE_MAXLEN_UNTIL_KILLED, ["assert add(1, 2) == 3"], sandbox, limits)
    assert result.fraction_passed == 0 and time.monotonic() - started < 5, result
    assert own_cgroups() == []
    honest = run_tests("def add(a, b):\n    return a + b\n", ["assert add(1, 2) == 3"], sandbox, limits)
    assert honest.status == "passed", honest


def test_a_deque_whose_maxlen_is_wider_than_a_c_integer_fails_its_test(sandbox, limits):
    result = run_tests(RETURNS_A_DEQUE_CLAIMING_A_WIDE_MAXLEN, ["assert make() is not None"], sandbox, limits)
    assert result.status == "failed" and "unreadable value" in str(result.error), result


WRITES_FROM_COLD_PAGES = r'''
import ctypes, os, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
class Piece(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
WINDOW = 8 << 20
windows = [(path, offset & ~4095) for path in FILES for offset in range(WINDOW // 2, os.stat(path).st_size - 4096, WINDOW)]
pieces = (Piece * 1024)()
for i in range(1024):  # each two-byte piece straddles two pages mapped from two cold windows: 2,048 page faults
    region = libc.mmap(None, 8192, 0, 0x22, -1, 0)
    for half in range(2):
        path, offset = windows[(2 * i + half) % len(windows)]
        fd = os.open(path, os.O_RDONLY)
        libc.mmap(region + 4096 * half, 4096, 1, 0x12, fd, offset)
        os.close(fd)
    pieces[i] = Piece(region + 4095, 2)
def write_them():
    time.sleep(2.0)
    os.write(1, b"x" * 100)  # the trainer wakes to read stdout...
    libc.writev(1, pieces, 1024)  # ...while this one write takes its 2,048 faults
threading.Thread(target=write_them, daemon=True).start()
def add(a, b):
    time.sleep(1000)
'''


@pytest.mark.slow
def test_a_write_from_cold_pages_never_holds_the_trainer_past_the_wall_clock(sandbox):
    """Measured before the fix, this write held the trainer's read 14 s past the wall clock (the pages are made cold
    first: the host's cache of these files is dropped, as a run's own memory cgroup would evict them)."""
    listing = subprocess.run(["find", sys.base_prefix, "/usr", "-xdev", "-type", "f", "-size", "+24M"],
                             capture_output=True, text=True, check=False).stdout.split()
    files = sorted(listing, key=os.path.getsize, reverse=True)
    if not files:
        pytest.skip("no large host file to map")
    for path in files:
        with open(path, "rb") as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    source = f"FILES = {files!r}\n" + WRITES_FROM_COLD_PAGES
    started = time.monotonic()
    result = run_tests(source, ["assert add(1, 2) == 3"], sandbox, SandboxLimits(wall_seconds=5, cpu_seconds=4,
                                                                                  memory_mb=256))
    assert result.status == "timeout" and time.monotonic() - started < 7.5, (time.monotonic() - started, result)
