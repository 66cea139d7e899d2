"""One answer rule for every task: exactly one well-formed container, nothing answer-like beside it.

Each hole below scored 1 before the rule, each false zero scored 0; both are checked in
every task, through the task's own metric (its accuracy reward with its options).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tasks import RowError, get_task
from tasks.guards import Guards, guarded_answer

# A correct answer written as {} in each task, and the rows that make it correct.
CORRECT = {"clevr_count": "3", "math": "0.5", "geometry": "B", "grounding": "[20, 10, 60, 50]"}
WRONG = {"clevr_count": "4", "math": "1/3", "geometry": "A", "grounding": "[0, 0, 5, 5]"}

HOLES = [
    "<think>x</think><answer>{right}</answer><answer>{wrong}",  # second tag left unclosed
    "<think>x</think><answer>{right}</answer> \\boxed{{{wrong}}}",  # a box beside the tag
    "<think>x</think><answer>{right}</answer></answer>",  # stray closing tag
    "<think>x</think><answer><answer>{right}</answer>",  # stray opening tag
    "<think>so <answer>{right}</answer></think> I am not sure.",  # answered only while thinking
    "<think>maybe <answer>{wrong}</answer></think><answer>{right}</answer>",  # a second answer in the reasoning
    "\\boxed{{{right}}} \\boxed{{{wrong}}}",  # two boxes
]


def task_and_sample(name: str, tmp_path: Path):
    row = {"id": "r1", "problem": "Where is the red square?", "answer": 3}
    if name == "math":
        row.update(problem="Halve one.", answer="1/2")
    if name == "geometry":
        row.update(problem="Find x.", answer="B", choices=["10", "12", "14", "16"])
    if name == "grounding":
        image = tmp_path / "scene.png"
        Image.new("RGB", (100, 100)).save(image)
        row.update(answer=[20, 10, 60, 50], image=str(image))
        return get_task(name, coords="absolute_original"), get_task(name, coords="absolute_original").to_sample(row)
    if name == "clevr_count":
        row["image"] = "/a.png"
    task = get_task(name)
    return task, task.to_sample(row)


@pytest.mark.parametrize("name", sorted(CORRECT))
@pytest.mark.parametrize("hole", HOLES)
def test_ambiguous_answers_score_zero_in_every_task(name: str, hole: str, tmp_path: Path) -> None:
    task, sample = task_and_sample(name, tmp_path)
    completion = hole.format(right=CORRECT[name], wrong=WRONG[name])
    assert task.metric(completion, sample) == 0.0
    assert task.metric(f"<think>x</think><answer>{CORRECT[name]}</answer>", sample) == 1.0


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_one_box_without_tags_is_the_answer_in_every_task(name: str, tmp_path: Path) -> None:
    task, sample = task_and_sample(name, tmp_path)
    assert task.metric(f"<think>x</think> So it is \\boxed{{{CORRECT[name]}}}.", sample) == 1.0


@pytest.mark.parametrize("completion, tripped", [
    ("<answer>3</answer><answer>4", "malformed_answer"),
    ("<answer>3</answer></answer>", "malformed_answer"),
    ("<answer>0.5</answer> \\boxed{1/3}", "multiple_answers"),
    ("<think><answer>3</answer></think>", "answer_in_think"),
    ("<think>x</think><answer>\\boxed{3}</answer>", None),  # a box inside the tag is the answer itself
    ("<think>x</think><answer>3</answer> Hope this helps.", None),  # prose after the answer is not an answer
    ("<think>halfway \\boxed{4}, then</think><answer>3</answer>", None),  # an intermediate result while thinking
    ("<think>so \\boxed{4}</think>", "answer_in_think"),  # nothing follows the reasoning: answered while thinking
])
def test_each_hole_is_named(completion: str, tripped: str | None) -> None:
    assert guarded_answer(completion).tripped == tripped


@pytest.mark.parametrize("answer", ["\\boxed{B}", "\\text{B}", "Option B", "The answer is B", "The answer is (B).",
                                    "$\\boxed{\\text{B}}$", "Answer: B", "The correct option is \\boxed{B}"])
def test_decorated_option_letters_are_read(answer: str) -> None:
    task, sample = task_and_sample("geometry", Path("."))
    assert task.metric(f"<think>x</think><answer>{answer}</answer>", sample) == 1.0
    assert task.metric(f"<think>x</think><answer>{answer.replace('B', 'C')}</answer>", sample) == 0.0


@pytest.mark.parametrize("name, solution", [("clevr_count", "<answer>3</answer><answer>4</answer>"),
                                            ("math", "<answer>3</answer><answer>4</answer>"),
                                            ("math", "<answer>3</answer><answer>4"),
                                            ("geometry", "<answer>B</answer><answer>C</answer>")])
def test_ambiguous_solutions_are_rejected_at_load(name: str, solution: str) -> None:
    row = {"id": "amb", "problem": "Find x.", "answer": solution, "image": "/a.png", "choices": ["1", "2", "3"]}
    with pytest.raises(RowError, match="'amb'.*'answer'.*ambiguous"):
        get_task(name).to_sample(row)


def test_a_solution_with_one_answer_tag_is_its_content() -> None:
    sample = get_task("math").to_sample({"id": "m", "problem": "?", "answer": "<answer> \\frac{1}{2} </answer>"})
    assert sample.answer.strip() == "\\frac{1}{2}"


def test_with_answer_in_think_off_the_reasoning_does_not_count() -> None:
    completion = "<think>halfway <answer>4</answer>, then</think><answer>3</answer>"
    assert guarded_answer(completion).tripped == "answer_in_think"
    assert guarded_answer(completion, guards=Guards(answer_in_think=False)).text == "3"
    assert guarded_answer("<think><answer>3</answer></think>", guards=Guards(answer_in_think=False)).text == "3"
