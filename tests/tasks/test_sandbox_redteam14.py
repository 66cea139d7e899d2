"""Red team, round 14: ``process_madvise`` on the calling thread's own memory (the sentinel pidfd
``PIDFD_SELF_THREAD``, no ``pidfd_open`` needed) gave the ``MADV_WILLNEED`` the filter refuses to ``madvise``: 40,000
page reads of a bound library queued behind the run's read throttle at once; after a killed trainer a host reader of
that file waited 8 s a read, and with the trainer alive a write into stdout from the last queued page held the pipe's
lock, so the trainer's read of stdout slept 9 s past the wall clock."""

from __future__ import annotations

from tasks.sandbox import run_tests
from tests.tasks.test_sandbox_redteam import limits, sandbox  # noqa: F401 - fixtures

ADVISES_ITSELF = """
import ctypes, mmap, os, platform, sys
libc = ctypes.CDLL(None, use_errno=True)
PIDFD_SELF_THREAD = -10000
def will_need():
    with open(os.path.realpath(sys.executable), 'rb') as library:
        mapped = mmap.mmap(library.fileno(), 0, prot=mmap.PROT_READ)
        address = ctypes.addressof(ctypes.c_char.from_buffer_copy(b'x'))  # any address: the call is refused first
        vector = (ctypes.c_void_p * 2)(address, 4096)
        number = {"x86_64": 440, "aarch64": 440}[platform.machine()]
        done = libc.syscall(number, PIDFD_SELF_THREAD, vector, 1, mmap.MADV_WILLNEED, 0)
        mapped.close()
        return done, ctypes.get_errno()
"""


def test_process_madvise_is_refused(sandbox, limits):
    result = run_tests(ADVISES_ITSELF, ["assert will_need() == (-1, 1)"], sandbox, limits)
    assert (result.status, result.passed) == ("passed", 1), result
