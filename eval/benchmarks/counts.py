"""Counting benchmarks (CLEVR, SuperCLEVR, CountBench): one image, a "how many" question, an integer answer.

A subclass reads its rows into items whose answer is the count (an int) and names its reader
(:meth:`CountQuestion.read_count`); the verdict is exact integer equality, an answer its reader cannot
read is wrong and noted ``unread``. :class:`R1VCount` asks and reads as R1-V's counting evaluation
(Deep-Agent/R1-V ``src/eval/test_qwen2vl_counting_superclevr.py``): its question template, then the digits
inside the first ``<answer>`` tags (:func:`eval.scoring.counting.r1v_count`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_recipes.adapters.base import BadRow
from eval.benchmarks import files
from eval.benchmarks.base import Ask, Benchmark, Item, PromptStyle, Verdict
from eval.benchmarks.lettered import UNREAD
from eval.scoring.counting import r1v_count

R1V_TEMPLATE = ("{question} First output the thinking process in <think> </think> and final answer (number) "
                "in <answer> </answer> tags.")


def published_count(value: Any) -> int:
    """A published count (an int, or its digits as text); ``BadRow`` otherwise."""
    text = str(value).strip()
    if not text.isdigit():
        raise BadRow("bad field", f"count {value!r} is not a whole number")
    return int(text)


class CountQuestion(Benchmark):
    """A counting question on one image, scored by exact integer match."""

    def count_item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str, *,
                   question: str, count: Any, image_column: str) -> Item:
        """The item of a row whose image is in ``image_column`` (bytes or a path relative to ``folder``)."""
        answer = published_count(count)
        images, refs = files.images(raw, (image_column,), folder, item_id=item_id, file_label=str(path))
        return Item(item_id, question.strip(), images, refs, answer)

    @abstractmethod
    def read_count(self, completion: str) -> int | None:
        """The count the benchmark's reader finds in ``completion``; None when it finds none."""

    def task_question(self, item: Item) -> str:
        return item.question

    def extract(self, completion: str, item: Item) -> int | None:
        return self.read_count(completion)

    def score(self, extracted: int | None, item: Item) -> Verdict:
        return Verdict(extracted, extracted, extracted == item.answer, "" if extracted is not None else UNREAD)

    def submission(self, item: Item, completion: str, verdict: Verdict) -> tuple[str, Any]:
        return item.id, verdict.prediction


class R1VCount(CountQuestion):
    """Asked with R1-V's template, which already asks for ``<think>`` then ``<answer>``: the completion is read
    whole under both prompt styles (the task style asks for the same tags)."""

    max_new_tokens = 256  # R1-V's generate call

    def official_prompt(self, item: Item) -> str:
        return R1V_TEMPLATE.format(question=item.question)

    def read_count(self, completion: str) -> int | None:
        return r1v_count(completion)

    def judge(self, completion: str, item: Item, style: PromptStyle = "official", ask: Ask | None = None) -> Verdict:
        return super().judge(completion, item, "official", ask)

