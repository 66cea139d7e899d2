"""The ``http`` sandbox back end against a local fake of the SandboxFusion ``/run_code`` API (never the network)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tasks import get_task
from tasks.code import code_passed, code_tests
from tasks.sandbox import SandboxLimits, make_sandbox, run_tests
from tasks.sandbox_http import HttpSandbox
from tests.tasks.fake_sandbox_service import FakeSandboxFusion

ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]
CORRECT_ADD = "def add(a, b):\n    return a + b\n"


LIMITS = SandboxLimits(wall_seconds=3, cpu_seconds=2, memory_mb=256)


def test_calls_the_tests_name_with_literals_take_one_run_code_request_with_the_runs_limits(service):
    sandbox, limits = make_sandbox({"backend": "http", "url": service.url, "wall_seconds": 3, "memory_mb": 256})
    result = run_tests(CORRECT_ADD + "print('hello')", ADD_TESTS, sandbox, limits)
    assert (result.status, result.passed, result.stdout, result.rounds) == ("passed", 3, "hello", 1)
    (path, request), *_ = service.requests
    assert len(service.requests) == 1 and path == "/run_code" and request["language"] == "python"
    assert request["run_timeout"] <= 3 and request["memory_limit_MB"] == 256
    assert "assert" not in request["stdin"]  # the tests stay here
    wrong = run_tests("class Yes:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n"
                      "    return Yes()", ADD_TESTS, sandbox, limits)
    assert (wrong.status, wrong.passed) == ("failed", 0)


HUMANEVAL_STYLE = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\ncheck(add)"
LOOPED = "for x in range(3):\n    assert add(x, 1) == x + 1"


RANDOM_CHECK = ("import random\ndef check(candidate):\n    for _ in range(50):\n"
                "        text = ''.join(random.choice('abc') for _ in range(random.randint(1, 9)))\n"
                "        assert candidate(text) == text[::-1]\ncheck(reverse)")


def test_a_check_function_and_loops_over_computed_inputs_take_one_request(service):
    """Every call used to be one more run replaying all calls before it: n calls cost n runs and ~n^2/2 calls; a loop
    over computed (or randomly drawn, HumanEval's) inputs took a run per call until the plan ran the tests here."""
    sandbox = HttpSandbox(service.url)
    assert run_tests(CORRECT_ADD, [HUMANEVAL_STYLE], sandbox, LIMITS).rounds == 1
    looped = run_tests(CORRECT_ADD, [LOOPED], sandbox, LIMITS)
    assert (looped.status, looped.passed, looped.rounds) == ("passed", 1, 1) and len(service.requests) == 2
    reverse = "def reverse(text):\n    return text[::-1]\n"
    drawn = run_tests(reverse, [RANDOM_CHECK], sandbox, LIMITS)
    assert (drawn.status, drawn.passed, drawn.rounds) == ("passed", 1, 1) and len(service.requests) == 3
    wrong = run_tests("def reverse(text):\n    return text\n", [RANDOM_CHECK], sandbox, LIMITS)
    assert (wrong.status, wrong.passed) == ("failed", 0)
    nested = run_tests(CORRECT_ADD, ["assert add(add(1, 1), 1) == 3"], sandbox, LIMITS)
    assert (nested.status, nested.rounds) == ("passed", 2)  # the outer call needs the inner one's answer first


ROUND_TRIP = ("import random\nfor _ in range(40):\n    text = ''.join(random.choice('abcdef') for _ in range(9))\n"
              "    assert decode(encode(text)) == text")
CODEC = "def encode(text):\n    return text[1:] + text[:1]\n"


def test_a_loop_of_calls_needing_earlier_answers_takes_a_second_request_not_one_each(service):
    """HumanEval/38's round trip: each ``decode`` needs ``encode``'s answer; the first request answers every
    ``encode``, the tests are planned again on those answers and the second answers every ``decode`` (one request
    per call before, 41 in all, and the wall clock ran out)."""
    sandbox = HttpSandbox(service.url)
    right = run_tests(CODEC + "def decode(text):\n    return text[-1:] + text[:-1]\n", [ROUND_TRIP], sandbox, LIMITS)
    assert (right.status, right.passed, right.rounds) == ("passed", 1, 2) and len(service.requests) == 2
    wrong = run_tests(CODEC + "def decode(text):\n    return text\n", [ROUND_TRIP], sandbox, LIMITS)
    assert (wrong.status, wrong.passed) == ("failed", 0)
    stateful = "calls = [0]\ndef decode(text):\n    calls[0] += 1\n    return text[-1:] + text[:-1] if calls[0] < 30 else ''\n"
    live = run_tests(CODEC + stateful, [ROUND_TRIP], make_sandbox({"backend": "process"})[0], LIMITS)
    replayed = run_tests(CODEC + stateful, [ROUND_TRIP], sandbox, LIMITS)
    assert (replayed.status, replayed.passed) == (live.status, live.passed) == ("failed", 0)


COUNTER = "count = [0]\ndef tick(x):\n    count[0] += 1\n    return count[0]\n"
COUNTER_TESTS = ["for _ in range(2):\n    assert tick(7) >= 1", "assert tick(9) == 3"]
HANGS_ON_99 = "def add(a, b):\n    while a == 99:\n        pass\n    return a + b\n"
NEVER_CALLED = ["assert add(1, 2) == 3", "if add(1, 1) == 5:\n    add(99, 0)"]


@pytest.mark.parametrize(("source", "tests"), [(COUNTER, COUNTER_TESTS), (HANGS_ON_99, NEVER_CALLED)],
                         ids=["calls-out-of-plan", "planned-call-never-made"])
def test_replayed_runs_grade_as_a_live_session_whatever_the_plan_guessed(service, source, tests):
    """A program with state answers each call as the calls before it left it (a repeated call used to reuse its
    first answer: ``tick(9)`` then got 2); a planned call the tests never make cannot decide the verdict."""
    live = run_tests(source, tests, make_sandbox({"backend": "process", "wall_seconds": 1})[0], LIMITS)
    replayed = run_tests(source, tests, HttpSandbox(service.url), replace(LIMITS, wall_seconds=1))
    assert (replayed.status, replayed.passed) == (live.status, live.passed) == ("passed", 2)


def test_the_services_time_limit_is_a_timeout(service):
    result = run_tests("import time\ntime.sleep(100)", ADD_TESTS, HttpSandbox(service.url), LIMITS)
    assert result.status == "timeout" and result.fraction_passed == 0


def test_failed_requests_are_retried_then_the_run_is_unavailable_and_scores_no_verdict():
    flaky = FakeSandboxFusion(failures=2)
    down = FakeSandboxFusion(sandbox_error=True)
    try:
        retried = run_tests(CORRECT_ADD, ADD_TESTS, HttpSandbox(flaky.url, retries=2, backoff_seconds=0.01), LIMITS)
        assert retried.status == "passed" and len(flaky.requests) == 2 + 1  # two refused, then one for the 3 calls
        sandbox = HttpSandbox(down.url, retries=1, backoff_seconds=0.01)
        unavailable = run_tests(CORRECT_ADD, ADD_TESTS, sandbox, LIMITS)
        assert unavailable.status == "unavailable" and "no runner free" in unavailable.error
        assert len(down.requests) == 2 and "2 attempts" in unavailable.error
        completions = ["```python\n" + CORRECT_ADD + "```", "no code block"]
        options = {"sandbox": sandbox, "limits": LIMITS}
        assert code_tests(completions, [ADD_TESTS] * 2, **options) == [None, 0.0]
        assert code_passed(completions, [ADD_TESTS] * 2, **options) == [None, 0.0]
        assert len(down.requests) == 6  # no verdict is not remembered: each reward asked again
    finally:
        flaky.close()
        down.close()


def test_an_unreachable_service_is_unavailable_and_a_task_without_url_is_refused():
    result = run_tests(CORRECT_ADD, ADD_TESTS, HttpSandbox("http://127.0.0.1:9", retries=0), LIMITS)
    assert result.status == "unavailable" and "Connection refused" in result.error
    with pytest.raises(ValueError, match="needs task.options.sandbox.url"):
        get_task("code", sandbox={"backend": "http"})
    with pytest.raises(ValueError, match="http:// or https://"):
        HttpSandbox("sandbox:8080")
