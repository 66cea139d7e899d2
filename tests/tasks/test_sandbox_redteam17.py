"""Red team, round 17 (default configuration): the code sent, down its stdout socket, the read end of a pipe of its own
whose lock a writer held over cold page faults; the trainer's read dropped the last reference to it and waited on that
lock 10-40 s past the wall clock. And one-byte sends from eight threads (each its own socket buffer) cost the trainer
0.9-1.5 s of CPU per run. ``sendmsg`` is refused (no descriptor can be sent), the trainer's ends refuse descriptors
where the kernel can, and the child's send buffer is small."""

from __future__ import annotations

import array
import os
import re
import resource
import socket
import sys

import pytest

from tasks.sandbox import SandboxLimits, run_tests
from tasks.sandbox_local import _one_way_pair
from tests.tasks.test_sandbox_redteam import limits, sandbox  # noqa: F401 - fixtures

SENDS_A_DESCRIPTOR = """
import array, os, socket
def send():
    read_end, write_end = os.pipe()
    channel = socket.socket(fileno=os.dup(1))
    try:
        channel.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [read_end]))])
    except PermissionError:
        return "refused"
    return "sent"
"""


def test_no_file_descriptor_can_be_sent_to_the_trainer(sandbox, limits):
    result = run_tests(SENDS_A_DESCRIPTOR, ["assert send() == 'refused'"], sandbox, limits)
    assert (result.status, result.passed) == ("passed", 1), result


def test_the_trainers_ends_refuse_descriptors_where_the_kernel_can():
    release = tuple(int(part) for part in re.findall(r"\d+", os.uname().release)[:2])
    if sys.platform != "linux" or release < (6, 16):
        pytest.skip(f"SO_PASSRIGHTS is Linux 6.16+ (this kernel: {os.uname().release})")
    ours, theirs = _one_way_pair(ours_write=False)
    readable, other = socket.socketpair()
    with ours, theirs, readable, other, pytest.raises(PermissionError):
        theirs.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [readable.fileno()]))])


FLOODS_ONE_BYTE_SENDS = """
import os, socket, threading
def spam(fd):
    channel = socket.socket(fileno=os.dup(fd))
    while True:
        channel.send(b"!")
for i in range(8):
    threading.Thread(target=spam, args=(1 + i % 2,), daemon=True).start()
def add(a, b):
    import time
    time.sleep(100)
"""


def test_a_flood_of_one_byte_sends_costs_the_trainer_little(sandbox):
    """Measured: 0.86-1.51 s of the trainer's CPU per 10 s run before, 0.32-0.34 s after (user and system time)."""
    before = resource.getrusage(resource.RUSAGE_THREAD)
    result = run_tests(FLOODS_ONE_BYTE_SENDS, ["assert add(1, 2) == 3"], sandbox, SandboxLimits())
    after = resource.getrusage(resource.RUSAGE_THREAD)
    spent = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    assert result.status == "timeout" and spent < 0.7, (spent, result)
