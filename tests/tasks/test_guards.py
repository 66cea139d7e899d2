"""Each reward-hacking guard: it zeroes accuracy when on, names itself, and can be switched off."""

from __future__ import annotations

import pytest

from tasks import REWARDS, Guards, guarded_answer
from tasks.guards import approx_token_count

PROBLEM = "How many of the 3 red cubes are behind the large green cylinder?"

# guard name -> (a completion that trips it and would be correct without it, the option turning it off)
HACKS = {
    "too_long": ("<think>" + "hmm " * 2000 + "</think><answer>3</answer>", {"max_tokens": 1000}),
    "multiple_answers": ("<answer>2</answer><answer>3</answer>", {"multiple_answers": False}),
    "malformed_answer": ("<answer>3</answer><answer>4", {"malformed_answer": False}),
    "answer_in_think": ("<think>it is <answer>3</answer></think> done", {"answer_in_think": False}),
    "untagged_answer": ("<think>I count them</think> 3", {"untagged_answer": False}),
    "prompt_copy": ("<answer>many of the 3 red cubes are behind: 3</answer>", {"prompt_copy": False}),
}


@pytest.mark.parametrize("guard", sorted(HACKS))
def test_each_guard_trips_when_on_and_can_be_switched_off(guard: str) -> None:
    completion, switch = HACKS[guard]
    on, off = (switch, {}) if guard == "too_long" else ({}, switch)  # the length limit is off by default
    assert guarded_answer(completion, PROBLEM, Guards(**on)).tripped == guard
    assert REWARDS.get("count_accuracy")([completion], answer=[3], problem=[PROBLEM], guards=on) == [0.0]
    assert guarded_answer(completion, PROBLEM, Guards(**off)).tripped is None
    if guard != "prompt_copy":  # the copied answer is not a bare count either way
        assert REWARDS.get("count_accuracy")([completion], answer=[3], problem=[PROBLEM], guards=off) == [1.0]


def test_empty_answer_guard() -> None:
    assert guarded_answer("<think>x</think><answer> \n</answer>").tripped == "empty_answer"
    assert guarded_answer("<answer></answer>", guards=Guards(empty_answer=False)).text is None


def test_lenient_reading_takes_the_last_answer_or_the_text_after_thinking() -> None:
    assert guarded_answer("<answer>2</answer><answer>3</answer>", guards=Guards.off()).text == "3"
    assert guarded_answer("<think>hmm</think> 3 ", guards=Guards.off()).text == " 3 "


@pytest.mark.parametrize("answer", ["3", " 3 ", "three", "(B)", "[10, 20, 30, 40]"])
def test_a_short_answer_that_also_appears_in_the_question_is_not_a_copy(answer: str) -> None:
    assert guarded_answer(f"<think>x</think><answer>{answer}</answer>", PROBLEM).text == answer


def test_restating_the_question_in_the_reasoning_is_not_a_copy() -> None:
    completion = f"<think>The question: {PROBLEM} I see 2.</think><answer>2</answer>"
    assert REWARDS.get("count_accuracy")([completion], answer=[2], problem=[PROBLEM]) == [1.0]


def test_copy_of_a_short_question_is_caught_by_the_whole_question() -> None:
    assert guarded_answer("<answer>How many cubes?</answer>", "How many cubes?").tripped == "prompt_copy"
    assert guarded_answer("<answer>many cubes</answer>", "How many cubes?").tripped is None


def test_length_limit_is_off_by_default_and_counts_tokens_not_characters() -> None:
    long_reasoning = "<think>" + "Consider the cube behind the sphere. " * 400 + "</think><answer>3</answer>"
    assert len(long_reasoning) > 4000  # the old 4000-character limit zeroed this correct answer
    assert REWARDS.get("count_accuracy")([long_reasoning], answer=[3], problem=[PROBLEM]) == [1.0]
    tokens = approx_token_count(long_reasoning)
    assert tokens == 7 * 400 + 2 * 3 + 1 + 2 * 4  # words and symbols; tags are 3 or 4 pieces
    assert guarded_answer(long_reasoning, guards=Guards(max_tokens=tokens)).text == "3"
    assert guarded_answer(long_reasoning, guards=Guards(max_tokens=tokens - 1)).tripped == "too_long"


def test_guard_options_are_validated() -> None:
    assert Guards.coerce({"max_tokens": 100}) == Guards(max_tokens=100)
    assert Guards.coerce(False) == Guards.off() and Guards.coerce(None) == Guards()
    assert not any(value for value in vars(Guards.off()).values() if isinstance(value, bool))
    with pytest.raises(ValueError, match="unknown guard option.*max_chars"):
        Guards.coerce({"max_chars": 100})
    with pytest.raises(ValueError, match="max_tokens"):
        Guards(max_tokens=0)
