"""Red team, round 15: with the read throttle on, a write into stdout from mapped pages of cold host files, each fault
waiting at the back of the run's queued read-arounds, held the pipe's lock and so the trainer's read of it 93 s past a
5 s wall clock (a larger pipe, ``F_SETPIPE_SZ``, let one write cover 256 pages); a SIGKILLed trainer stuck in that read
died 97 s later. The throttle is off by default now (opt-in, its cost said), and the pipe cannot be grown."""

from __future__ import annotations

import os

from tasks import sandbox_cgroup
from tasks.sandbox import SandboxLimits, run_tests
from tests.tasks.test_sandbox_redteam import limits, sandbox  # noqa: F401 - fixtures

GROWS_ITS_PIPE = """
import fcntl
def grow():
    try:
        return fcntl.fcntl(1, 1031, 1 << 20)  # F_SETPIPE_SZ on its stdout
    except PermissionError:
        return 'refused'
"""


def test_the_stdout_pipe_cannot_be_grown(sandbox, limits):
    result = run_tests(GROWS_ITS_PIPE, ["assert grow() == 'refused'"], sandbox, limits)
    assert (result.status, result.passed) == ("passed", 1), result


def test_runs_are_not_read_throttled_unless_asked(monkeypatch):
    assert (SandboxLimits().read_mb_per_second, SandboxLimits().read_ops_per_second) == (0, 0)
    io = [found for found in sandbox_cgroup.hierarchies() if found.io and not found.memory]
    made = []
    real_mkdir = os.mkdir
    monkeypatch.setattr(os, "mkdir", lambda path, *args: made.append(path) or real_mkdir(path, *args))
    cgroup = sandbox_cgroup.create(1 << 28, 0, 0, ("/usr",))
    try:
        assert not any(path.startswith(found.parent) for found in io for path in made)
        assert cgroup is None or cgroup.unthrottle == ()
    finally:
        if cgroup is not None:
            cgroup.remove()
