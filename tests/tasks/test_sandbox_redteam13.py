"""Red team, round 13: ``preadv2`` with ``RWF_NOWAIT`` started the read-ahead the refused ``readahead`` and
``madvise(MADV_WILLNEED)`` started, and returned at once: 56,000 page reads of a bound library queued behind the run's
throttle in 0.5 s; after a killed trainer a host read of that file took 21 s, and threads of the run waiting on
uncached metadata behind the queue outlived the trainer by 30 s."""

from __future__ import annotations

from tasks.sandbox import run_tests
from tests.tasks.test_sandbox_redteam import limits, sandbox  # noqa: F401 - fixtures

READS = """
import os, sys
descriptor = os.open(os.path.realpath(sys.executable), os.O_RDONLY)
def nowait():
    try:
        os.preadv(descriptor, [bytearray(4096)], 0, os.RWF_NOWAIT)
    except PermissionError:
        return 'refused'
def plain():
    return os.preadv(descriptor, [bytearray(4096)], 0), os.preadv(descriptor, [bytearray(8)], 0, os.RWF_HIPRI)
"""


def test_nowait_reads_are_refused_and_other_vectored_reads_are_not(sandbox, limits):
    result = run_tests(READS, ["assert nowait() == 'refused'", "assert plain() == (4096, 8)"], sandbox, limits)
    assert (result.status, result.passed) == ("passed", 2), result
