"""Counting, shared by ``clevr_count`` (image), ``video_count`` and ``audio_count``.

What counts as a correct count (decided here, once, for all three tasks): the single
answer the guards accept (see :mod:`tasks.guards`) must read as exactly one
non-negative integer equal to the ground truth:

- surrounding whitespace is accepted: ``"<answer> 3 </answer>"``;
- Unicode decimal digits are accepted: ``"３"`` (full-width), ``"٣"`` (Arabic-Indic) --
  they are the same number, written in another script;
- English number words 0-99 are accepted, any case: ``"three"``, ``"Twenty-one"`` --
  a model that writes the word has counted right; refusing it would reward the
  format, which the ``format`` reward already does;
- anything else is wrong: units (``"3 cubes"``), punctuation (``"3."``), a sign, a
  decimal (``"3.0"``), two numbers, superscripts (``"³"``).

The ground truth may be an int, a string integer (``"3"``) or the CLEVR-70k solution
string ``"<answer> 3 </answer>"``; anything else is a data error and raises.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from mmgrpo.types import Sample
from tasks.base import RowError, Task
from tasks.guards import Guards, guarded_answer, single_answer
from tasks.parsing import parse_integer
from tasks.registry import register_reward


def count_ground_truth(answer: Any) -> int:
    """The integer count in ``answer`` (int, ``"3"`` or ``"<answer> 3 </answer>"``); ValueError otherwise."""
    if isinstance(answer, int) and not isinstance(answer, bool) and answer >= 0:
        return answer
    if isinstance(answer, str):
        count = parse_integer(single_answer(answer), allow_words=False)
        if count is not None:
            return count
    raise ValueError(f"ground-truth count must be a non-negative int or a string holding one, got {answer!r}")


def completion_count(completion: str, problem: str | None = None, guards: Guards | None = None) -> int | None:
    """The count a completion commits to after the guards, or None."""
    answer = guarded_answer(completion, problem, guards, read=parse_integer).text
    return None if answer is None else parse_integer(answer)


@register_reward("count_accuracy")
def count_accuracy(
    completions: Sequence[str],
    answer: Sequence[Any],
    problem: Sequence[str | None] | None = None,
    *,
    guards: Guards | Mapping[str, Any] | bool | None = None,
    **_,
) -> list[float]:
    guards = Guards.coerce(guards)
    problems = problem if problem is not None else [None] * len(completions)
    return [
        float(completion_count(text, question, guards) == count_ground_truth(truth))
        for text, truth, question in zip(completions, answer, problems)
    ]


class CountingTask(Task):
    """A task whose answer is how many things the media shows (or plays).

    Rows that list their ``objects`` (the procedural generators do) keep each object's colour
    and shape for the ``object_mentions`` process reward; with ``list_objects`` the cold-start
    SFT target's reasoning names them, one line each.
    """

    default_rewards = {"format": 0.1, "count_accuracy": 1.0}
    metric_reward = "count_accuracy"
    guarded_rewards = ("count_accuracy",)

    def __init__(self, *, list_objects: bool = False, **options: Any) -> None:
        super().__init__(**options)
        self.list_objects = list_objects

    def task_fields(self, row: Mapping[str, Any]) -> dict[str, Any]:
        objects = row.get("objects")
        if not isinstance(objects, list):
            return {}
        return {"objects": [{"colour": obj.get("colour"), "shape": obj.get("shape")} for obj in objects]}

    def reference_completion(self, sample: Sample) -> str:
        objects = sample.extra.get("objects")
        if not (self.list_objects and objects) or sample.extra.get("think") is False:
            return super().reference_completion(sample)
        listing = "\n".join(f"{obj['colour']} {obj['shape']}" for obj in objects)
        return f"<think>\n{listing}\n</think><answer>{self.format_answer(sample)}</answer>"

    def ground_truth(self, row: Mapping[str, Any]) -> int:
        try:
            return count_ground_truth(row.get("answer"))
        except ValueError as error:
            raise RowError(row, "answer", str(error)) from None

    def parse(self, answer_text: str) -> int | None:
        return parse_integer(answer_text)
