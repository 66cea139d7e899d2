"""Costly work on untrusted input is done once per distinct input, also when threads ask for it at the same time."""

from __future__ import annotations

import threading
import time

import pytest

from tasks import code
from tasks.sandbox import SandboxLimits, SandboxResult
from tasks.shared_results import SharedResults

SOLUTION = "```python\ndef add(a, b):\n    return a + b\n```"


def test_identical_completions_graded_at_once_share_one_sandbox_run(monkeypatch):
    """A converged policy writes one solution G times: each copy started its own run while the first was going."""
    started: list[str] = []

    def slow_run(source, tests, sandbox, limits, entry_points):
        started.append(source)
        time.sleep(0.3)
        return SandboxResult("passed", len(tests), len(tests))

    monkeypatch.setattr(code, "run_tests", slow_run)
    monkeypatch.setattr(code, "RUNS", SharedResults(16, keep=code.RUNS.keep))
    completions = [SOLUTION] * 6 + [SOLUTION.replace("a + b", "b + a")] * 2
    results = code.sandbox_results(completions, [["assert add(1, 2) == 3"]] * 8, object(), SandboxLimits(),
                                   workers=8)
    assert [result.status for result in results] == ["passed"] * 8
    assert len(started) == 2


def test_a_value_not_kept_and_an_exception_reach_the_waiters_and_are_made_again_next_time():
    results = SharedResults[str](4, keep=lambda value: value != "unavailable")
    made, gate = [], threading.Event()

    def make() -> str:
        made.append(1)
        gate.wait(5)
        return "unavailable"

    seen: list[str] = []
    threads = [threading.Thread(target=lambda: seen.append(results.get("k", make))) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    gate.set()
    for thread in threads:
        thread.join()
    assert seen == ["unavailable"] * 3 and len(made) == 1 and "k" not in results.entries
    assert results.get("k", lambda: "ok") == "ok" and results.get("k", lambda: "again") == "ok"

    def fail() -> str:
        raise OSError("helper could not start")

    with pytest.raises(OSError):
        results.get("e", fail)
    assert "e" not in results.entries and results.get("e", lambda: "ok") == "ok"


def test_budgets_drop_the_oldest_finished_entries_but_never_the_newest():
    results = SharedResults[str](10, budgets={"chars": 5}, weigh=lambda value: {"chars": len(value)})
    for key in "abc":
        results.get(key, lambda: "xx")
    assert list(results.entries) == ["b", "c"] and results.held == {"chars": 4}
    results.get("big", lambda: "x" * 9)
    assert list(results.entries) == ["big"] and results.held == {"chars": 9}
