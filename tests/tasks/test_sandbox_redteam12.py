"""Red team, round 12: what was left around round 11's fixes.

A ``sync`` loop waited, unkillable, for the host's whole write-back and kept the run's process alive past its run
(and a killed trainer's), its cgroups left for good; ``madvise(MADV_WILLNEED)`` queued reads behind the throttle as
the refused ``readahead`` did; 99 nested tuples around 24,000 fractions cost the trainer 1.1 s to hash-check.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tasks import sandbox_cgroup
from tasks.sandbox import run_tests
from tasks.sandbox_grading import RefusedValue, decode
from tests.tasks.test_sandbox_redteam import ADD_TESTS, CORRECT_ADD, limits, sandbox  # noqa: F401 - fixtures

WAITS_ON_THE_HOST = """
import ctypes, mmap, os, platform, sys
libc = ctypes.CDLL(None, use_errno=True)
def sync():  # the C library's sync() returns nothing: the system call itself
    return libc.syscall({"x86_64": 162, "aarch64": 81}[platform.machine()]), ctypes.get_errno()
def syncfs():
    return libc.syncfs(0), ctypes.get_errno()
def will_need():
    with open(os.path.realpath(sys.executable), 'rb') as library:
        mapped = mmap.mmap(library.fileno(), 0, prot=mmap.PROT_READ)
        try:
            mapped.madvise(mmap.MADV_WILLNEED)
        except PermissionError:
            return 'refused'
        finally:
            mapped.madvise(mmap.MADV_DONTNEED)  # innocent advice stays allowed
            mapped.close()
"""


def test_waits_on_the_host_are_refused(sandbox, limits):
    result = run_tests(WAITS_ON_THE_HOST, ["assert sync() == (-1, 1)", "assert syncfs() == (-1, 1)",
                                           "assert will_need() == 'refused'"], sandbox, limits)
    assert (result.status, result.passed) == ("passed", 3), result


def nested_fractions(depth: int, count: int) -> dict:
    """``count`` small fractions inside ``depth`` nested tuples, as the sandbox encodes them."""
    value: dict | list = [{"q": [index, 7]} for index in range(1, count + 1)]
    value = {"t": value}
    for _ in range(depth - 1):
        value = {"t": [value, 1]}
    return value


def test_nested_tuples_are_hash_checked_within_a_bounded_work():
    """Each level hashed everything inside it again: 99 levels of 24,000 fractions (a 0.44 MB answer) cost about 10x
    the trainer's CPU of 2 levels of them (measured 2.1 s against 0.2 s), now about 3x (0.6 s against 0.19 s). Both
    are timed here, so the bound holds on a loaded machine too (a bound in seconds failed there: 0.705 s)."""
    started = time.thread_time()
    decode(nested_fractions(2, 24_000))
    shallow = time.thread_time() - started
    started = time.thread_time()
    with pytest.raises(RefusedValue, match="tuples nested too deeply"):
        decode(nested_fractions(99, 24_000))
    assert time.thread_time() - started < 6 * shallow
    honest = decode({"t": [{"t": [{"q": [1, 3]}, 2]}, {"t": [{"q": [2, 3]}, 4]}]})
    assert repr(honest) == "((Fraction(1, 3), 2), (Fraction(2, 3), 4))"
    assert len(decode([nested_fractions(3, 10)] * 1000)) == 1000  # shallow nesting in bulk is honest


def test_a_cgroup_still_busy_after_its_run_is_removed_at_a_later_run(monkeypatch):
    if not sandbox_cgroup.hierarchies():
        pytest.skip("no per-run cgroups here (the trainer is not root, or its cgroup may have no children)")
    monkeypatch.setattr(sandbox_cgroup, "_REMOVE_SECONDS", 0.05)
    busy = sandbox_cgroup.create(1 << 28, 1 << 20, 100, ("/usr",))
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        for procs in busy.procs:
            with open(procs, "w") as members:
                members.write(str(sleeper.pid))
        busy.remove()
        assert all(os.path.isdir(path) for path in busy.paths)  # a process is still in them
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
    later = sandbox_cgroup.create(1 << 28, 1 << 20, 100, ("/usr",))
    later.remove()
    assert not any(os.path.isdir(path) for path in busy.paths + later.paths)
