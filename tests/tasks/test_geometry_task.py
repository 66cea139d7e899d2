"""Multiple choice (geometry3k style): letters, option text, and their conflicts."""

from __future__ import annotations

import pytest

from tasks import REWARDS, RowError, get_task, math_verifier

CHOICES = ["10", "12", "\\frac{7}{2}", "15"]
PROBLEM = "Find x."

CHOICE_TABLE = [
    # (completion, expected for ground truth B = "12")
    ("<think>x</think><answer>B</answer>", 1.0),
    ("<think>x</think><answer>(B)</answer>", 1.0),
    ("<think>x</think><answer> B. </answer>", 1.0),
    ("<think>x</think><answer>B)</answer>", 1.0),
    ("<think>x</think><answer>(B) 12</answer>", 1.0),  # letter and matching text
    ("<think>x</think><answer>B: 12</answer>", 1.0),
    ("<think>x</think><answer>12</answer>", 1.0),  # option text
    ("<think>x</think><answer>$12$</answer>", 1.0),
    ("<think>x</think><answer>12.0</answer>", 1.0),  # equivalent to exactly one option
    ("<think>x</think><answer>(B) 15</answer>", 0.0),  # letter and text disagree
    ("<think>x</think><answer>A</answer>", 0.0),  # wrong letter
    ("<think>x</think><answer>15</answer>", 0.0),  # wrong option text
    ("<think>x</think><answer>b</answer>", 0.0),  # letters are upper case
    ("<think>x</think><answer>E</answer>", 0.0),  # no option E
    ("<think>x</think><answer>13</answer>", 0.0),  # no such option
    ("<think>x</think><answer>A or B</answer>", 0.0),
    ("B", 0.0),  # missing tags
    ("<think>x</think><answer>A</answer><answer>B</answer>", 0.0),  # two answers
    ("<think>x</think><answer><answer>B</answer></answer>", 0.0),  # nested
    ("<think>x</think><answer> </answer>", 0.0),  # empty
]


@pytest.mark.parametrize("completion, expected", CHOICE_TABLE)
def test_choice_accuracy_table(completion: str, expected: float) -> None:
    scores = REWARDS.get("choice_accuracy")([completion], answer=["B"], problem=[PROBLEM], choices=[CHOICES])
    assert scores == [expected]


def test_fraction_option_is_matched_by_equivalence() -> None:
    reward = REWARDS.get("choice_accuracy")
    assert reward(["<answer>3.5</answer>", "<answer>7/2</answer>"], answer=["C", "C"], choices=[CHOICES] * 2) == [1.0, 1.0]


@pytest.mark.parametrize("answer", ["B", "(B)", "12"])
def test_ground_truth_as_letter_or_option_text_becomes_the_letter(answer: str) -> None:
    task = get_task("geometry")
    sample = task.to_sample({"id": "g1", "problem": PROBLEM, "answer": answer, "choices": CHOICES, "images": ["/d.png"]})
    assert sample.answer == "B" and sample.extra["choices"] == CHOICES
    assert sample.media("image") == ["/d.png"]
    text = sample.messages[-1]["content"][-1]["text"]
    assert "Choices:\n(A) 10\n(B) 12\n(C) \\frac{7}{2}\n(D) 15" in text
    assert task.metric("<think>x</think><answer>(B)</answer>", sample) == 1.0


def test_an_unreadable_answer_is_read_once_not_compared_with_every_option(monkeypatch: pytest.MonkeyPatch) -> None:
    requests: list[list[str]] = []

    def unreadable(request: list[str], timeout_seconds: float) -> bool:  # math-verify reads nothing in time
        requests.append(request)
        return False

    monkeypatch.setattr(math_verifier, "_check", unreadable)
    junk = "x" * 100_000 + " never asked before"  # uncached: each math-verify attempt took the whole timeout
    assert REWARDS.get("choice_accuracy")([f"<answer>{junk}</answer>"], answer=["B"], choices=[CHOICES]) == [0.0]
    assert requests == [["gold", junk]]


def test_ground_truth_outside_the_choices_is_a_row_error() -> None:
    with pytest.raises(RowError, match="'g2'.*'answer'"):
        get_task("geometry").to_sample({"id": "g2", "problem": PROBLEM, "answer": "13", "choices": CHOICES})


def test_row_without_choices_is_graded_as_free_form_math() -> None:
    task = get_task("geometry")
    sample = task.to_sample({"id": "g3", "problem": PROBLEM, "answer": "2\\sqrt{3}", "image": "/d.png"})
    assert sample.extra["choices"] is None and "Choices" not in sample.messages[-1]["content"][-1]["text"]
    assert task.metric("<think>x</think><answer>\\sqrt{12}</answer>", sample) == 1.0
    assert task.metric("<think>x</think><answer>3</answer>", sample) == 0.0


@pytest.mark.parametrize("text", ["(B) Moved right.", "(B) Moved right", "B. moved right.", "Moved right", "(B)."])
def test_option_text_reads_with_or_without_its_final_period(text: str) -> None:
    from tasks.geometry import resolve_choice

    assert resolve_choice(text, ["Moved left.", "Moved right.", "Stayed still."]) == 1
