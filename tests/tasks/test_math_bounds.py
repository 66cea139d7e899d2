"""math-verify on pathological answers: bounded in time (on any thread), silent, computed once."""

from __future__ import annotations

import threading
import time

import pytest

from eval.runner import score_item
from mmgrpo.types import Completion
from tasks import REWARDS, get_task
from tasks.math_verifier import is_equivalent

# Answers sympy would work on for minutes (a power tower, a double factorial of a huge number).
PATHOLOGICAL = ["9^{9^{9^{9}}}", "100000!!"]
SLACK = 1.5  # seconds for process start-up and scheduling on a busy machine


@pytest.fixture(autouse=True)
def warm_worker_and_fresh_cache() -> None:
    REWARDS.get("math_accuracy")(["<answer>1</answer>"], answer=["1"])  # a worker starts outside the timed part
    is_equivalent.cache_clear()


@pytest.mark.parametrize("answer", PATHOLOGICAL)
def test_a_pathological_answer_is_bounded_and_silent(answer: str, capfd: pytest.CaptureFixture) -> None:
    started = time.perf_counter()
    assert REWARDS.get("math_accuracy")([f"<answer>{answer}</answer>"], answer=["3"], timeout_seconds=0.5) == [0.0]
    assert time.perf_counter() - started < 0.5 + SLACK
    assert REWARDS.get("math_accuracy")(["<answer>1/2</answer>"], answer=["0.5"]) == [1.0]  # a fresh worker took over
    out, err = capfd.readouterr()
    assert "Timeout" not in out + err and out + err == ""


def test_the_bound_holds_off_the_main_thread() -> None:
    results: list[list[float]] = []

    def score() -> None:
        REWARDS.get("math_accuracy")(["<answer>0.5</answer>"], answer=["1/2"])  # start this thread's worker
        started = time.perf_counter()
        results.append(REWARDS.get("math_accuracy")([f"<answer>{PATHOLOGICAL[0]}</answer>"], answer=["3"],
                                                    timeout_seconds=0.5))
        results.append([time.perf_counter() - started])

    worker = threading.Thread(target=score)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert results[0] == [0.0] and results[1][0] < 0.5 + SLACK


def test_eval_checks_each_completion_once() -> None:
    task = get_task("math")
    sample = task.to_sample({"id": "m", "problem": "What is 3?", "answer": "3"})
    completions = [Completion(text=f"<answer>{PATHOLOGICAL[0]}</answer>", token_ids=[1]),
                   Completion(text="<answer>3</answer>", token_ids=[1])]
    record = score_item(sample, completions, task)
    assert [c.metric for c in record.completions] == [0.0, 1.0]
    assert [c.rewards["math_accuracy"] for c in record.completions] == [0.0, 1.0]
    checks = is_equivalent.cache_info()
    assert (checks.misses, checks.hits) == (2, 0)  # one check per completion; the metric reuses the reward's
