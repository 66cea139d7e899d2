"""Red team, round 11: what the per-run I/O cgroup, the CPUs shown and the new answer kinds opened.

Direct reads queued behind the run's read throttle kept its process alive, unkillable, after the run (and after a
killed trainer), with its cgroups; an answer holding a Decimal and a wide int held the trainer's GIL for 20 s; every
run got the same CPUs and could widen them; a root on no block device went unthrottled without a word.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from pathlib import Path

import pytest

from tasks import sandbox_cgroup
from tasks.sandbox import run_tests
from tests.tasks.test_sandbox_redteam import ADD_TESTS, CORRECT_ADD, limits, sandbox  # noqa: F401 - fixtures

DIRECT_READERS = """
import mmap, os, threading
buffer, refused = mmap.mmap(-1, 1 << 20), []
def reader(path):
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except PermissionError:
        refused.append(path)
        return
    while True:
        os.preadv(descriptor, [buffer] * 256, 0)  # 256 MB in one read the kernel cannot interrupt
readers = [threading.Thread(target=reader, args=({path!r},), daemon=True) for _ in range(4)]
for thread in readers:
    thread.start()
def refusals():
    for thread in readers:
        thread.join(1)
    return len(refused)
"""


def large_library() -> Path:
    return next(path for path in sorted(Path(sys.base_prefix).rglob("*.so*")) if path.stat().st_size >= 1 << 20)


def own_cgroups() -> list[str]:
    return [os.path.join(found.parent, name) for found in sandbox_cgroup.hierarchies()
            for name in os.listdir(found.parent) if name.startswith(f"mmgrpo-sandbox-{os.getpid()}-")]


def test_direct_reads_are_refused_so_no_run_outlives_its_end(sandbox, limits):
    """Four threads' 256 MB direct reads behind the 64 MB/s throttle kept the process alive ~5 s past the run (minutes
    with more threads and larger reads), its cgroups left behind; buffered reads wait killably."""
    source = DIRECT_READERS.format(path=str(large_library())) + CORRECT_ADD
    started = time.monotonic()
    result = run_tests(source, [*ADD_TESTS, "assert refusals() == 4"], sandbox, limits)
    assert result.status == "passed", result  # each thread's open refused
    assert time.monotonic() - started < 3 and own_cgroups() == []
    refused = ("import fcntl, os\ndescriptor = os.open('/tmp/own', os.O_CREAT | os.O_RDWR)\n"
               "def set_direct():\n    try:\n        fcntl.fcntl(descriptor, fcntl.F_SETFL, os.O_DIRECT)\n"
               "    except PermissionError:\n        return 'refused'\n"
               "def read_ahead():\n    import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n"
               "    return libc.readahead(descriptor, ctypes.c_long(0), ctypes.c_size_t(1 << 20)), ctypes.get_errno()\n"
               "def buffered():\n    return len(open(__import__('sys').executable, 'rb').read(4096))\n")
    checks = ["assert set_direct() == 'refused'", "assert read_ahead() == (-1, 1)", "assert buffered() == 4096"]
    assert run_tests(refused, checks, sandbox, limits).status == "passed"


def test_each_run_starts_its_cpus_at_random_and_cannot_widen_them(sandbox, limits):
    """Every run was PID 1 of its namespace, so ``pid % cpus`` gave every run the same CPUs; the code could then
    widen its set again with ``sched_setaffinity``."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nothing to spread over")
    source = ("import os\ndef cpus():\n    return sorted(os.sched_getaffinity(0))\ndef widen():\n    try:\n"
              "        os.sched_setaffinity(0, range(1024))\n    except PermissionError:\n        return 'refused'\n")
    one_cpu = dataclasses.replace(limits, processes=7)
    seen = set()
    for _ in range(12):
        result = run_tests(source, ["assert len(cpus()) == 1", "assert widen() == 'refused'",
                                    "assert cpus() is None, cpus()"], sandbox, one_cpu)  # the last tells them
        assert (result.status, result.passed) == ("failed", 2), result
        seen.add(result.error)
    assert len(seen) > 1  # 12 runs on one CPU each never all land on the same one by chance (p = 2^-11 on 2 CPUs)


def test_the_read_throttle_is_lifted_before_the_runs_processes_are_killed():
    """Reads queued behind it then finish at once; a left cgroup's throttle is lifted by the next trainer's sweep."""
    if not any(found.io for found in sandbox_cgroup.hierarchies()):
        pytest.skip("no per-run I/O cgroup here (the trainer is not root, or its cgroup may have no children)")
    cgroup = sandbox_cgroup.create(1 << 28, 1 << 20, 100, ("/usr",))
    try:
        limits_files = [path for path, _ in cgroup.unthrottle]
        assert limits_files and all(open(path).read().strip() for path in limits_files)
        cgroup.lift_io()
        assert not any(open(path).read().strip() and "max" not in open(path).read() for path in limits_files)
    finally:
        cgroup.remove()


def test_a_root_on_no_block_device_is_said_to_go_unthrottled(monkeypatch, caplog):
    """btrfs and ZFS show an anonymous ``0:NN`` device in the mount table: no disk to throttle, said in the log."""
    table = [(["27", "1", "0:31", "/", "/"], "btrfs", "rw"), (["28", "27", "0:32", "/", "/usr"], "btrfs", "rw")]
    monkeypatch.setattr(sandbox_cgroup, "_mounts", lambda: table)
    assert sandbox_cgroup.block_devices(("/usr/lib", "/opt/python")) == ()
    monkeypatch.setattr(sandbox_cgroup, "hierarchies", lambda: (sandbox_cgroup.Hierarchy("/nowhere", 2, io=True),))
    monkeypatch.setattr(os, "mkdir", lambda *args: (_ for _ in ()).throw(PermissionError("not here")))
    with caplog.at_level(logging.INFO, logger="tasks.sandbox_cgroup"):
        assert sandbox_cgroup.create(1 << 28, 1 << 20, 100, ("/usr/lib", "/opt/python")) is None
    assert "disk reads are not throttled: no block device found behind /usr/lib, /opt/python" in caplog.text
