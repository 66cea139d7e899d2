"""score_completions: weighting, None handling, per-component reporting, errors naming the reward."""

from __future__ import annotations

import math

import pytest

from mmgrpo.types import Sample
from tasks import REWARDS, get_task, register_reward, reward_fields, score_completions
from tasks.reward_calls import RewardFailure, RewardPolicy


def sample(sample_id: str, answer: object, **extra: object) -> Sample:
    return Sample(id=sample_id, task="test", messages=[], answer=answer, extra={"problem": "How many?", **extra})


@register_reward("test_only_odd_answers")
def only_odd_answers(completions: list[str], answer: list[int], **_) -> list[float | None]:
    """1 for odd ground truths, None (not applicable) for even ones."""
    return [1.0 if value % 2 else None for value in answer]


@register_reward("test_broken")
def broken(completions: list[str], **_) -> list[float]:
    raise ZeroDivisionError("oops")


@register_reward("test_short")
def short(completions: list[str], **_) -> list[float]:
    return [1.0]


def test_weighted_total_skips_not_applicable_components() -> None:
    samples = [sample("a", 3, think=True), sample("b", 4, think=False)]
    completions = ["<think>x</think><answer>3</answer>", "<think>x</think><answer>4</answer>"]
    weights = {"format": 0.5, "count_accuracy": 2.0, "test_only_odd_answers": 10.0}
    result = score_completions(completions, samples, weights)
    assert result.components == {
        "format": [1.0, 0.0],  # the second sample was prompted without thinking
        "count_accuracy": [1.0, 1.0],
        "test_only_odd_answers": [1.0, None],
    }
    assert result.total == pytest.approx([0.5 + 2.0 + 10.0, 2.0])
    assert result.means() == pytest.approx({"format": 0.5, "count_accuracy": 1.0, "test_only_odd_answers": 1.0,
                                            "total": 7.25})


def test_zero_weight_is_reported_but_not_added() -> None:
    result = score_completions(["<answer>3</answer>"], [sample("a", 3, think=False)], {"format": 1.0, "count_accuracy": 0.0})
    assert result.components["count_accuracy"] == [1.0] and result.total == [1.0]


def test_item_no_component_applies_to_scores_zero_and_mean_is_nan() -> None:
    result = score_completions(["x"], [sample("a", 2)], {"test_only_odd_answers": 1.0})
    assert result.total == [0.0] and math.isnan(result.means()["test_only_odd_answers"])


def test_reward_options_reach_the_named_reward_only() -> None:
    completion = "<think>x</think>3"  # untagged: 0 with guards, 1 without
    samples = [sample("a", 3)]
    assert score_completions([completion], samples, {"count_accuracy": 1.0}).total == [0.0]
    lenient = score_completions([completion], samples, {"count_accuracy": 1.0},
                                reward_options={"count_accuracy": {"guards": False}})
    assert lenient.total == [1.0]
    with pytest.raises(ValueError, match="not in the weights"):
        score_completions([completion], samples, {"format": 1.0}, reward_options={"count_accuracy": {}})


def test_task_reward_options_carry_its_guards() -> None:
    task = get_task("clevr_count", guards={"untagged_answer": False})
    result = score_completions(["<think>x</think>3"], [sample("a", 3)], task.default_rewards,
                               reward_options=task.reward_options())
    assert result.components["count_accuracy"] == [1.0]


def test_fields_align_extra_keys_across_a_mixed_batch() -> None:
    fields = reward_fields([sample("a", 1, choices=["x", "y"]), sample("b", 2, coords="norm1000")])
    assert fields == {"answer": [1, 2], "problem": ["How many?"] * 2, "choices": [["x", "y"], None],
                      "coords": [None, "norm1000"], "media": [[], []]}


def test_errors_name_the_reward() -> None:
    samples = [sample("a", 3)]
    strict = RewardPolicy(errors="raise")
    with pytest.raises(RewardFailure, match="reward 'test_broken' on sample 'a' .*raised: ZeroDivisionError: oops"):
        score_completions(["x"], samples, {"test_broken": 1.0}, policy=strict)
    with pytest.raises(RewardFailure, match="reward 'test_short' .*returned 1 values for 2 completions"):
        score_completions(["x", "y"], samples * 2, {"test_short": 1.0}, policy=strict)
    with pytest.raises(KeyError, match="unknown reward 'formt'.*Did you mean 'format'"):
        score_completions(["x"], samples, {"formt": 1.0})
    with pytest.raises(ValueError, match="2 completions but 1 samples"):
        score_completions(["x", "y"], samples, {"format": 1.0})


def test_duplicate_reward_name_is_refused() -> None:
    with pytest.raises(KeyError, match="registered twice: by .*tasks/.* and by "):
        register_reward("format")(lambda completions, **_: [0.0] * len(completions))
    assert REWARDS.get("format").__name__ == "format_reward"
