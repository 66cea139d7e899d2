"""Red team, round 7: ``splice`` and ``sendfile`` into stdout that held the pipe's lock (the trainer's read slept past
any wall clock), event lines whose junk cost the trainer's CPU, a parse cache bounded by its names' count, not their
length, and an answer line just over the limit that waited out the wall clock."""

from __future__ import annotations

import dataclasses
import os
import platform
import signal
import threading
import time

import pytest

from tasks import sandbox_seccomp, syntax
from tasks.sandbox import MAX_NOTE_BYTES, Events, run_tests
from tests.tasks.test_sandbox_redteam import ADD_TESTS, CORRECT_ADD, limits, sandbox  # noqa: F401 - fixtures

_COLUMN = {"x86_64": 0, "aarch64": 1}.get(platform.machine())


@pytest.mark.skipif(_COLUMN is None, reason="system call numbers for x86-64 and AArch64 only")
@pytest.mark.parametrize("name", ["splice", "tee", "vmsplice", "sendfile", "copy_file_range"])
def test_calls_that_hold_a_pipes_lock_are_refused(sandbox, limits, name):
    number = sandbox_seccomp.NUMBERS[name][_COLUMN]
    source = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              f"def probe():\n    libc.syscall({number}, -1, 0, -1, 0, 1, 0)\n    return ctypes.get_errno()\n")
    result = run_tests(source, ["import errno\nassert probe() == errno.EPERM"], sandbox, limits)
    assert result.status == "passed", result


def _descendants(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listing:
                children = [int(child) for child in listing.read().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *_descendants(child)]
    return found


HOLD_STDOUT = """
import os, socket, threading, time
a, b = socket.socketpair()
def hold():
    os.write(1, b"x")
    try:
        {call}
    except OSError:
        pass
threading.Thread(target=hold, daemon=True).start()
time.sleep(0.2)
"""


@pytest.mark.parametrize("call", ["os.splice(a.fileno(), 1, 1 << 16)", "os.sendfile(1, a.fileno(), None, 1 << 16)"])
def test_a_call_waiting_on_an_empty_socket_into_stdout_does_not_hang_the_trainer(sandbox, limits, call):
    """Watchdog: past 30 s (the wall clock is 3 s) the run's processes are killed here, which frees the trainer."""
    source = HOLD_STDOUT.format(call=call) + CORRECT_ADD
    done = []
    worker = threading.Thread(target=lambda: done.append(
        run_tests(source, ADD_TESTS, sandbox, dataclasses.replace(limits, wall_seconds=3))), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(30)
    hung = worker.is_alive()
    if hung:
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        worker.join(10)
    assert not hung, "the trainer's read of stdout hung past the wall clock"
    assert time.monotonic() - started < 30 and done[0].status == "passed", done


def test_event_fields_the_child_writes_as_strings_are_read_as_strings_only():
    tag = "t "
    nested = "[" * 850 + ",".join(["[0]"] * 1000) + "]" * 850
    for line, reason in [(f'{{"i": 0, "raised": [{nested}, "x"]}}', "exception"),
                         ('{"i": 0, "raised": [1, "x"]}', "exception"),
                         ('{"i": 0, "value": 1, "junk": [1.5, 2.5]}', "fields"),
                         ('{"violation": [1]}', "refusal"), ('{"error": {"a": 1}}', "load error"),
                         ('{"loaded": true, "junk": "' + "x" * (MAX_NOTE_BYTES + 1) + '"}', "longer than")]:
        events = Events.parse("t {\"loaded\": true}\n" * ("error" not in line and "junk" not in line) + tag + line,
                              tag, 1)
        assert events.malformed and reason in events.malformed, (line[:40], events)
        assert 0 not in events.outcomes
    honest = Events.parse('t {"loaded": true}\nt {"i": 0, "raised": ["ValueError", "bad"]}\nt {"i": 1, "value": 2}',
                          tag, 2)
    assert not honest.malformed and honest.outcomes[0].raised == ("ValueError", "bad") and 1 in honest.outcomes


FORGED_RAISED = r'''
import sys
JUNK = "[" * 850 + ",".join(["[0]"] * 240000) + "]" * 850
def f(i):
    frame = sys._getframe(1)
    while frame is not None and "emit" not in frame.f_locals:
        frame = frame.f_back
    names = frame.f_locals
    names["channel"].write(names["tag"] + '{"i": %d, "raised": [%s, "x"]}\n' % (names["index"], JUNK))
    names["channel"].flush()
    return i
'''


def test_a_forged_nested_exception_name_ends_the_run_at_little_cost_to_the_trainer(sandbox, limits):
    """The events are read in the calling thread: its own CPU time is measured (0.03-0.45 s, with how much the
    child wrote before it was stopped), not the process's, which other threads of a shared test worker add to. Beside
    a loaded clean-clone CI run (the vLLM environment building) it read 1.03 s once; parsing each of the 40 calls'
    junk lines, as before round 7, costs 0.1-0.3 s a line: several seconds, well past the bound."""
    started = time.thread_time()
    result = run_tests(FORGED_RAISED, ["for i in range(40):\n    try:\n        f(i)\n    except Exception:\n"
                                       "        pass"], sandbox, limits)
    assert result.status == "no_verdict" and "exception" in result.error, result
    assert time.thread_time() - started < 2.0


def test_the_parse_cache_holds_a_bounded_count_of_characters_of_names():
    cache = syntax.ParseCache(size=100, max_names=1000, max_chars=1000)
    for index in range(10):
        cache.names(f"N{index}" + "x" * 400 + " = 1\n")
    assert len(cache.entries) == 2 and cache.held["chars"] == 2 * 402
    assert sum(len(name) for entry in cache.entries.values() for name in entry.result()) == cache.held["chars"]
    assert cache.names("N9" + "x" * 400 + " = 1\n") == {"N9" + "x" * 400}


def test_an_answer_line_just_over_the_limit_ends_the_run_at_once(sandbox, limits):
    """The line's end arrives in the read that crosses 1 MB: it was dropped unread and the run waited out its wall
    clock (``timeout``)."""
    started = time.monotonic()
    result = run_tests("def f(n):\n    return list(range(n))\n", ["assert len(f(150000)) == 150000"], sandbox,
                       dataclasses.replace(limits, wall_seconds=8, file_size_mb=8))
    assert result.status == "output_limit" and "answer line" in result.error, result
    assert time.monotonic() - started < 6
