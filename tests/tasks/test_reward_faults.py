"""Rewards under faults: NaN/inf, exceptions on one completion, hangs, numpy scalars, the error policy."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from mmgrpo.config import load_config
from mmgrpo.trainer.setup import scoring_rule
from mmgrpo.types import Completion, Sample
from tasks import get_task, register_reward, score_completions

RELEASE = threading.Event()  # lets hung test rewards return once a test is done with them
RELEASE_HUNG = threading.Event()


def sample(sample_id: str, answer: object = 3) -> Sample:
    return Sample(id=sample_id, task="clevr_count", messages=[], answer=answer, extra={"problem": "How many?"})


@register_reward("test_fault_nan_on_b")
def nan_on_b(completions: list[str], **_) -> list[float]:
    return [float("nan") if text == "b" else float("inf") if text == "c" else 1.0 for text in completions]


@register_reward("test_fault_raises_on_b")
def raises_on_b(completions: list[str], **_) -> list[float]:
    if "b" in completions:
        raise ValueError("cannot parse 'b'")
    return [1.0] * len(completions)


@register_reward("test_fault_numpy")
def numpy_values(completions: list[str], **_) -> list:
    return [np.float32(0.5), np.int64(1), np.bool_(True), "high"][: len(completions)]


@register_reward("test_fault_hangs")
def hangs(completions: list[str], **_) -> list[float]:
    RELEASE.wait(timeout=3.0)  # a hang, bounded so that a test on old code ends
    return [1.0] * len(completions)


@register_reward("test_fault_hangs_until_released")
def hangs_until_released(completions: list[str], **_) -> list[float]:
    RELEASE_HUNG.wait(timeout=10.0)
    return [1.0] * len(completions)


@register_reward("test_fault_slow")
def slow(completions: list[str], **_) -> list[float]:
    time.sleep(0.2)
    return [1.0] * len(completions)


def test_nan_and_inf_are_errors_of_their_completion_only() -> None:
    result = score_completions(["a", "b", "c"], [sample("s1")] * 3, {"test_fault_nan_on_b": 1.0, "format": 0.5})
    assert result.components["test_fault_nan_on_b"] == [1.0, None, None]
    assert result.total == [1.0, 0.0, 0.0]  # format scores 0 for these texts; the failed reward is left out
    assert [(e.reward, e.sample_id, e.completion, e.kind) for e in result.errors] == [
        ("test_fault_nan_on_b", "s1", 1, "non-finite"), ("test_fault_nan_on_b", "s1", 2, "non-finite"),
    ]
    assert "nan" in result.errors[0].detail and "inf" in result.errors[1].detail


def test_a_reward_raising_on_one_completion_voids_only_that_one() -> None:
    samples = [sample("s1"), sample("s2"), sample("s3")]
    result = score_completions(["a", "b", "c"], samples, {"test_fault_raises_on_b": 1.0})
    assert result.components["test_fault_raises_on_b"] == [1.0, None, 1.0]
    (error,) = result.errors
    assert (error.sample_id, error.completion, error.kind) == ("s2", 1, "raised")
    assert "ValueError: cannot parse 'b'" in error.detail


def test_numpy_scalars_count_as_numbers_and_strings_do_not() -> None:
    result = score_completions(["a", "b", "c", "d"], [sample("s")] * 4, {"test_fault_numpy": 1.0})
    assert result.components["test_fault_numpy"] == [0.5, 1.0, 1.0, None]
    assert [(e.completion, e.kind) for e in result.errors] == [(3, "not a number")]
    assert "'high'" in result.errors[0].detail


def test_raise_policy_stops_naming_reward_sample_and_value() -> None:
    config = load_config(None, ["task.reward_errors=raise", "task.rewards={test_fault_nan_on_b: 1.0}"])
    rule = scoring_rule(config, get_task("clevr_count"))
    completions = [Completion(text=text, token_ids=[1]) for text in ("a", "b")]
    with pytest.raises(RuntimeError, match=r"reward 'test_fault_nan_on_b' on sample 's7' \(completion 1\).*nan"):
        rule.score(sample("s7"), completions)


def test_a_hanging_reward_times_out_and_the_rest_is_scored() -> None:
    config = load_config(None, ["task.reward_timeout=0.2", "task.rewards={test_fault_hangs: 1.0, format: 1.0}"])
    rule = scoring_rule(config, get_task("clevr_count"))
    completions = [Completion(text="<think>x</think><answer>3</answer>", token_ids=[1])] * 2
    started = time.perf_counter()
    try:
        rewards, breakdown = rule.score(sample("s1"), completions)
    finally:
        RELEASE.set()
    assert time.perf_counter() - started < 1.5
    assert breakdown.components["test_fault_hangs"] == [None, None]
    assert {(e.reward, e.kind) for e in breakdown.errors} == {("test_fault_hangs", "timeout")}
    assert rewards == breakdown.components["format"] == [1.0, 1.0]


def test_reward_calls_of_a_step_run_in_parallel_across_groups() -> None:
    config = load_config(None, ["task.reward_workers=8", "task.rewards={test_fault_slow: 1.0}"])
    rule = scoring_rule(config, get_task("clevr_count"))
    groups = [(sample(f"s{i}"), [Completion(text="x", token_ids=[1])] * 4) for i in range(8)]
    started = time.perf_counter()
    scored = rule.score_groups(groups)
    elapsed = time.perf_counter() - started
    assert [rewards for rewards, _ in scored] == [[1.0] * 4] * 8
    assert elapsed < 0.2 * 8 / 2, f"8 calls of 0.2 s on 8 workers took {elapsed:.2f} s"


def test_hung_calls_are_bounded_by_the_workers_not_piled_up() -> None:
    from tasks.reward_calls import RewardPolicy
    from tasks.timed_calls import abandoned_calls
    from tasks.scoring import score_batches

    reward = "test_fault_hangs_until_released"
    policy = RewardPolicy(timeout=0.2, workers=2)
    batches = [(["x"] * 2, [sample(f"s{i}")] * 2) for i in range(12)]
    try:
        started = time.perf_counter()
        first = score_batches(batches, {reward: 1.0}, policy=policy)
        hung = abandoned_calls(reward)
        # Both workers' first calls hang; a worker may start one more call in the instant before
        # the other's times out, then none: 2 or 3 hung threads, not 12.
        assert 2 <= hung < 2 * policy.workers, hung
        assert first[0].components[reward] == [None, None] and first[0].errors[0].kind == "timeout"
        again = score_batches(batches, {reward: 1.0}, policy=policy)
        assert time.perf_counter() - started < 2.0
        assert {error.kind for breakdown in again for error in breakdown.errors} == {"timeout"}
        assert "earlier calls still run past the timeout" in again[0].errors[0].detail
        assert abandoned_calls(reward) == hung, "no call is started while the earlier ones hang"
    finally:
        RELEASE_HUNG.set()
    deadline = time.perf_counter() + 5
    while abandoned_calls(reward) and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert abandoned_calls(reward) == 0, "a hung call that returns is no longer counted"
