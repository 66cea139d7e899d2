"""Counting accuracy (clevr_count, video_count, audio_count): what counts as the right count."""

from __future__ import annotations

import pytest

from tasks import REWARDS, RowError, get_task
from tasks.counting import count_ground_truth
from tasks.parsing import parse_integer

PROBLEM = "How many red cubes are there?"

COUNT_TABLE = [
    # (completion, expected accuracy for a ground truth of 3)
    ("<think>one, two, three</think><answer>3</answer>", 1.0),  # well-formed
    ("<answer>3</answer>", 1.0),  # answer-only mode
    ("<think>x</think><answer> 3 </answer>", 1.0),  # surrounding whitespace
    ("<think>x</think><answer>\n3\n</answer>", 1.0),
    ("<think>x</think><answer>３</answer>", 1.0),  # full-width digit
    ("<think>x</think><answer>٣</answer>", 1.0),  # Arabic-Indic digit
    ("<think>x</think><answer>three</answer>", 1.0),  # number word
    ("<think>x</think><answer> Three </answer>", 1.0),
    ("<think>x</think><answer>03</answer>", 1.0),  # leading zero is still three
    ("<think>x</think><answer>3</answer> and more text", 1.0),  # accuracy ignores trailing text; format does not
    ("<think>x</think><answer>4</answer>", 0.0),  # wrong
    ("<think>x</think><answer>³</answer>", 0.0),  # superscript is not a digit
    ("<think>x</think><answer>3 cubes</answer>", 0.0),  # units
    ("<think>x</think><answer>3.</answer>", 0.0),  # punctuation
    ("<think>x</think><answer>3.0</answer>", 0.0),  # decimal
    ("<think>x</think><answer>-3</answer>", 0.0),  # sign
    ("<think>x</think><answer>3 4</answer>", 0.0),  # two numbers
    ("<think>x</think><answer>thirty</answer>", 0.0),
    ("3", 0.0),  # missing tags
    ("<think>the answer is 3</think>3", 0.0),  # answer outside tags
    ("<think>x</think><answer>3</answer><answer>4</answer>", 0.0),  # two answers
    ("<think>x</think><answer>3</answer><answer>3</answer>", 0.0),  # two answers, even if equal
    ("<think>x</think><answer><answer>3</answer></answer>", 0.0),  # nested tags
    ("<think>x</think><answer></answer>", 0.0),  # empty answer
    ("<think>x</think><answer>3", 0.0),  # unclosed tag
    ("", 0.0),
]


@pytest.mark.parametrize("completion, expected", COUNT_TABLE)
def test_count_accuracy_table(completion: str, expected: float) -> None:
    assert REWARDS.get("count_accuracy")([completion], answer=[3], problem=[PROBLEM]) == [expected]


@pytest.mark.parametrize("truth", [3, "3", " 3 ", "<answer> 3 </answer>", "<answer>3</answer>"])
def test_ground_truth_forms(truth: object) -> None:
    assert count_ground_truth(truth) == 3
    assert REWARDS.get("count_accuracy")(["<answer>3</answer>", "<answer>2</answer>"], answer=[truth, truth]) == [1.0, 0.0]


@pytest.mark.parametrize("truth", ["three cubes", "", None, -1, 2.5, True, "<answer>3</answer><answer>4</answer>"])
def test_bad_ground_truth_is_a_data_error(truth: object) -> None:
    with pytest.raises(ValueError, match="ground-truth count|ambiguous solution"):
        count_ground_truth(truth)


@pytest.mark.parametrize("text, expected", [("twenty-one", 21), ("Twenty one", 21), ("ninety nine", 99), ("zero", 0),
                                            ("twenty", 20), ("twenty-zero", None), ("one two", None), ("1 2", None)])
def test_number_words(text: str, expected: int | None) -> None:
    assert parse_integer(text) == expected


def test_a_number_too_long_for_int_reads_as_no_count_instead_of_raising() -> None:
    huge = "9" * 5000  # int() refuses more than 4300 digits
    assert parse_integer(huge) is None and parse_integer("0" * 5000 + "3") == 3
    completions = [f"<think>x</think><answer>{huge}</answer>", f"\\boxed{{{huge}}}", "<answer>3</answer>"]
    assert REWARDS.get("count_accuracy")(completions, answer=[3] * 3) == [0.0, 0.0, 1.0]


@pytest.mark.parametrize("name, media", [("clevr_count", "image"), ("video_count", "video"), ("audio_count", "audio")])
def test_counting_tasks_build_prompts_and_grade(name: str, media: str) -> None:
    task = get_task(name)
    row = {"id": "r1", "problem": PROBLEM, "answer": "<answer> 2 </answer>", media: f"/data/{media}.bin"}
    sample = task.to_sample(row)
    assert sample.answer == 2 and sample.media(media) == [f"/data/{media}.bin"]
    assert task.metric("<think>x</think><answer>two</answer>", sample) == 1.0
    assert task.metric("<think>x</think><answer>3</answer>", sample) == 0.0
    assert task.parse_answer("<answer>3</answer><answer>two</answer>") == 2  # lenient reading: the last answer
    with pytest.raises(RowError, match=f"r1.*{media}"):
        task.to_sample({"id": "r1", "problem": PROBLEM, "answer": 2})


def test_counting_row_with_bad_answer_names_row_and_field() -> None:
    with pytest.raises(RowError, match="'bad'.*'answer'"):
        get_task("clevr_count").to_sample({"id": "bad", "problem": PROBLEM, "answer": "many", "image": "/a.png"})
