"""Red team, round 8, mostly on the http back end's replayed runs and their plan: calls equal in Python but not in
kind (``1 == 1.0``) shared an answer, planned calls were asked again by every run a loop started or spoiled the plan
for the rest, replayed answers were decoded again in every run, a service's stdout was split in Python and read
whole, a service's 1 MiB output cap cut answers that never came; and a ``from __future__`` completion after a
preamble, and ``fadvise`` on host files from the bwrap sandbox."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tasks.code import sandbox_results
from tasks.sandbox import SandboxLimits, run_tests
from tasks.sandbox_http import HttpSandbox
from tests.tasks.fake_sandbox_service import FakeSandboxFusion
from tests.tasks.test_sandbox_redteam import limits, sandbox  # noqa: F401 - fixtures

LIMITS = SandboxLimits(wall_seconds=6, cpu_seconds=3, memory_mb=256)


def replayed(source: str, tests: list[str], service: FakeSandboxFusion, limits: SandboxLimits = LIMITS):
    """The result on the http back end, and the trainer's CPU (this thread's) it cost."""
    started = time.thread_time()
    result = run_tests(source, tests, HttpSandbox(service.url, retries=0), limits)
    return result, time.thread_time() - started


STR_OF = "def f(x):\n    return str(x)\n"
KIND_TESTS = ["for i in range(2):\n    assert f(i) == str(i)\nassert f(1.0) == '1.0'"]
WRONG_FOR_INT_ONE = """
calls = [0]
def f(x):
    calls[0] += 1
    if type(x) is int and x == 1:
        return "WRONG"
    if type(x) is float and calls[0] == 2:
        return "1"
    return str(x)
"""


def test_calls_equal_in_python_but_not_in_kind_are_different_calls(service, sandbox):
    """The real ``f(1)`` got the answer of the planned ``f(1.0)``: honest code failed, and wrong code passed."""
    honest, _ = replayed(STR_OF, KIND_TESTS, service)
    assert (honest.status, honest.passed) == ("passed", 1) == (run_tests(STR_OF, KIND_TESTS, sandbox).status, 1)
    wrong, _ = replayed(WRONG_FOR_INT_ONE, KIND_TESTS, service)
    assert (wrong.status, wrong.passed) == ("failed", 0)


TRIANGLE = "def f(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n"
LOOP_THEN_LITERAL = ["for i in range(20):\n    assert f(i) == i * (i - 1) // 2\nassert f(3_000_000) == 3_000_000 * 2_999_999 // 2"]


def test_a_planned_call_after_a_loop_of_computed_ones_is_asked_once_not_by_every_run(service):
    result, _ = replayed(TRIANGLE, LOOP_THEN_LITERAL, service)
    assert (result.status, result.passed) == ("passed", 1), result
    assert sum("3000000" in request["stdin"] for _, request in service.requests) <= 2  # was one per loop iteration


PAIRS = "def f(n):\n    return [[i, i] for i in range(n)]\n"
BRANCH_NOT_TAKEN = ["if len(f(0)) == 1:\n    f(30_000), f(30_001), f(30_002)"] + [
    f"assert f({i}) == [[k, k] for k in range({i})]" for i in range(150)]


def test_a_planned_call_that_spoils_a_run_leaves_the_plan_and_the_rest_stays(service):
    """One planned call past ``answer_values`` (in a branch the tests never take) dropped the whole plan: 150 runs,
    each replaying all before it, and the wall clock ran out."""
    result, _ = replayed(PAIRS, BRANCH_NOT_TAKEN, service, dataclasses.replace(LIMITS, answer_values=50_000))
    assert (result.status, result.passed) == ("passed", 151), result
    assert len(service.requests) <= 6


FORGES_A_HUGE_FIRST_ANSWER = """
import sys
sent = [False]
def f(i):
    main = sys._getframe(1).f_locals
    if not sent[0] and len(main["job"]["calls"]) > 1:
        sent[0] = True
        body = '{"s": [' + ', '.join('{"fs": [%d]}' % k for k in range(55_000)) + ']}'
        sys.stdout.write(main["tag"] + '{"i": 0, "value": ' + body + '}\\n')
        sys.stdout.flush()
    return i
"""
NEWLINES = "import os\nos.write(1, b'\\n' * (7 << 20))\ndef f(i):\n    return i\n"


@pytest.mark.parametrize(("source", "cpu_per_run"), [(FORGES_A_HUGE_FIRST_ANSWER, 0.05), (NEWLINES, 0.4)],
                         ids=["replayed-answer", "newlines"])
def test_what_a_replayed_run_prints_costs_the_trainer_little(service, source, cpu_per_run):
    """Each run of a loop's calls rebuilt a forged 165,000-value answer to call 0 (~0.14 s of the trainer's CPU a
    run, the GIL held; now ~0.01 s) or split 7 MB of newlines into lines in Python (~1.7 s a run; now ~0.1 s, most
    of it reading the service's ~14 MB JSON answer)."""
    chained = "x = 0\nfor i in range(8):\n    x = f(x)\n    assert x == i\n    x += 1"  # each call needs the last answer
    result, cpu = replayed(source, [chained], service, dataclasses.replace(LIMITS, wall_seconds=20))
    assert (result.status, result.passed, result.rounds) == ("passed", 1, 8), result
    assert cpu / result.rounds < cpu_per_run


def test_a_response_longer_than_the_runs_output_could_make_it_is_not_read(service):
    result, cpu = replayed("import os\nos.write(1, b'\\n' * (7 << 20))\ndef f():\n    return 1\n", ["assert f() == 1"],
                           service, dataclasses.replace(LIMITS, file_size_mb=1))
    assert result.status == "output_limit" and "unread" in result.error, result
    assert cpu < 1.0


class OneMebibyteService(FakeSandboxFusion):
    """Keeps the first 1 MiB of a run's stdout, as SandboxFusion's runners do."""

    def run(self, request: dict) -> dict:
        answer = super().run(request)
        answer["run_result"]["stdout"] = answer["run_result"]["stdout"][:1 << 20]
        return answer


def test_answers_past_a_services_output_cap_come_in_later_runs():
    """Six answers of ~280 kB in one planned run passed 1 MiB: the ones past the cut were never asked again."""
    source = "def words(n):\n    return [str(k).zfill(12) for k in range(n)]\n"
    tests = [f"assert words({20_000 + i}) == [str(k).zfill(12) for k in range({20_000 + i})]" for i in range(6)]
    capped = OneMebibyteService()
    try:
        result, _ = replayed(source, tests, capped)
    finally:
        capped.close()
    assert (result.status, result.passed) == ("passed", 6), result
    assert 2 <= result.rounds <= 4


def test_a_completion_opening_with_future_imports_runs_after_the_preamble(sandbox, limits):
    completion = "```python\nfrom __future__ import annotations\ndef twice(x: int) -> int:\n    return helper(x) * 2\n```"
    result, = sandbox_results([completion], [["assert twice(2) == 6"]], sandbox, limits, workers=1,
                              preamble=["def helper(x):\n    return x + 1\n"])
    assert result.status == "passed", result


def test_fadvise_on_a_host_file_is_refused(sandbox, limits):
    """``POSIX_FADV_DONTNEED`` on the bound Python installation dropped its pages from the host's cache."""
    source = ("import os, sys\ndef drop():\n    fd = os.open(sys.executable, os.O_RDONLY)\n    try:\n"
              "        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n    except PermissionError:\n"
              "        return 'refused'\n    return 'dropped'\n")
    result = run_tests(source, ["assert drop() == 'refused'"], sandbox, limits)
    assert result.status == "passed", result
