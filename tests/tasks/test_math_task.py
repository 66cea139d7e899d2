"""Math accuracy through math-verify: equivalent forms, answer containers, guards."""

from __future__ import annotations

import threading

import pytest

from tasks import REWARDS, RowError, get_task

MATH_TABLE = [
    # (completion, ground truth, expected)
    ("<think>x</think><answer>\\frac{1}{2}</answer>", "0.5", 1.0),
    ("<think>x</think><answer>0.5</answer>", "\\frac{1}{2}", 1.0),
    ("<think>x</think><answer>$\\frac{1}{2}$</answer>", "1/2", 1.0),
    ("<think>x</think><answer>\\boxed{\\frac12}</answer>", "0.5", 1.0),  # boxed inside the tag
    ("The answer is \\boxed{0.5}.", "\\frac{1}{2}", 1.0),  # boxed, no tags
    ("<answer> 2\\sqrt{2} </answer>", "\\sqrt{8}", 1.0),  # symbolic equivalence
    ("<answer>x = 3</answer>", "3", 1.0),
    ("<answer>0.6</answer>", "\\frac{1}{2}", 0.0),  # wrong
    ("0.5", "0.5", 0.0),  # answer outside any container
    ("\\boxed{0.4} or maybe \\boxed{0.5}", "0.5", 0.0),  # two boxes: hedging
    ("<answer>0.4</answer><answer>0.5</answer>", "0.5", 0.0),  # two answers
    ("<answer><answer>0.5</answer></answer>", "0.5", 0.0),  # nested tags
    ("<answer></answer>", "0.5", 0.0),  # empty answer
    ("<answer>no idea }{ \\frac{</answer>", "0.5", 0.0),  # garbage never raises
]


@pytest.mark.parametrize("completion, truth, expected", MATH_TABLE)
def test_math_accuracy_table(completion: str, truth: str, expected: float) -> None:
    assert REWARDS.get("math_accuracy")([completion], answer=[truth], problem=["Halve one."]) == [expected]


def test_copying_the_question_into_the_answer_is_caught() -> None:
    problem = "Is $x = 3$ the solution of the equation $2x = 7$? Give x."
    completion = "<answer>Is $x = 3$ the solution of the equation</answer>"  # math-verify alone reads x = 3
    math_accuracy = REWARDS.get("math_accuracy")
    assert math_accuracy([completion], answer=["3"], problem=[problem], guards={"prompt_copy": False}) == [1.0]
    assert math_accuracy([completion], answer=["3"], problem=[problem]) == [0.0]


def test_math_accuracy_works_off_the_main_thread() -> None:
    results = []
    worker = threading.Thread(target=lambda: results.append(
        REWARDS.get("math_accuracy")(["<answer>0.5</answer>"], answer=["1/2"])))
    worker.start()
    worker.join()
    assert results == [[1.0]]


def test_math_task_prompt_metric_and_bad_ground_truth() -> None:
    task = get_task("math")
    sample = task.to_sample({"id": "m1", "problem": "What is half of one?", "answer": "\\frac{1}{2}"})
    assert sample.messages[-1]["content"] == [{"type": "text", "text": f"What is half of one?\n{task.think_instruction}"}]
    assert task.metric("<think>x</think><answer>0.5</answer>", sample) == 1.0
    assert task.parse_answer("so \\boxed{0.5}") == "0.5"
    with pytest.raises(RowError, match="'m2'.*'answer'.*cannot read"):
        task.to_sample({"id": "m2", "problem": "?", "answer": "\\frac{"})
