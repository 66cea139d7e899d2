"""The format rewards on a table of tricky completions, in both prompt modes."""

from __future__ import annotations

import pytest

from tasks import REWARDS

THINK_MODE_TABLE = [
    # (completion, think_format, answer_format)
    ("<think>two and one</think><answer>3</answer>", 1.0, 0.0),
    ("  <think>\nreasoning\n</think>\n\n<answer> 3 </answer>\n", 1.0, 0.0),  # whitespace around and between
    ("<think></think><answer>3</answer>", 1.0, 0.0),  # empty reasoning is still the format
    ("<answer>3</answer>", 0.0, 1.0),  # answer only
    ("   <answer>3</answer>  \n", 0.0, 1.0),
    ("3", 0.0, 0.0),  # missing tags
    ("<think>x</think>3", 0.0, 0.0),  # answer outside tags
    ("<think>x</think><answer>3</answer> so the answer is 3", 0.0, 0.0),  # text after the answer
    ("<answer>3</answer> done", 0.0, 0.0),
    ("Sure! <answer>3</answer>", 0.0, 0.0),  # text before the answer
    ("<think>x</think><answer>3</answer><answer>4</answer>", 0.0, 0.0),  # two answers
    ("<answer>3</answer><answer>4</answer>", 0.0, 0.0),
    ("<think>x</think><answer><answer>3</answer></answer>", 0.0, 0.0),  # nested tags
    ("<answer><answer>3</answer></answer>", 0.0, 0.0),
    ("<think>a<think>b</think></think><answer>3</answer>", 0.0, 0.0),  # nested think
    ("<think>x</think><think>y</think><answer>3</answer>", 0.0, 0.0),  # two think blocks
    ("<answer>3</answer><think>x</think>", 0.0, 0.0),  # wrong order
    ("<think>x</think><answer></answer>", 0.0, 0.0),  # empty answer
    ("<think>x</think><answer>  \n </answer>", 0.0, 0.0),
    ("<answer> </answer>", 0.0, 0.0),
    ("<think>x</think><answer>3", 0.0, 0.0),  # unclosed answer
    ("<think>x<answer>3</answer>", 0.0, 0.0),  # unclosed think
    ("", 0.0, 0.0),
]


@pytest.mark.parametrize("completion, expected_think, expected_answer", THINK_MODE_TABLE)
def test_strict_formats(completion: str, expected_think: float, expected_answer: float) -> None:
    assert REWARDS.get("think_format")([completion]) == [expected_think]
    assert REWARDS.get("answer_format")([completion]) == [expected_answer]


@pytest.mark.parametrize("completion, expected_think, expected_answer", THINK_MODE_TABLE)
def test_format_follows_each_samples_prompt_mode(completion: str, expected_think: float, expected_answer: float) -> None:
    scores = REWARDS.get("format")([completion] * 3, think=[True, False, None])
    assert scores == [expected_think, expected_answer, expected_think]  # missing mode means think


def test_format_without_a_think_field_expects_reasoning() -> None:
    assert REWARDS.get("format")(["<think>x</think><answer>3</answer>", "<answer>3</answer>"]) == [1.0, 0.0]


def test_length_penalty_ramps_from_zero_to_minus_one() -> None:
    penalty = REWARDS.get("length_penalty")
    scores = penalty(["x" * 50, "x" * 80, "x" * 90, "x" * 100, "x" * 500], max_chars=100, buffer_chars=20)
    assert scores == pytest.approx([0.0, 0.0, -0.5, -1.0, -1.0])
    with pytest.raises(ValueError, match="buffer_chars"):
        penalty(["x"], max_chars=10, buffer_chars=20)
