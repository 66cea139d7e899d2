"""Benchmarks answered in a word or a phrase (ChartQA, DocVQA, TextVQA, POPE, MME): one image, the question
then an instruction, and the completion scored as the benchmark's script scores it.

A subclass reads its rows into items (:meth:`question_item` does the common part) and gives the
credit of a prediction (:meth:`credit`: 1/0, or partial as ANLS and VQA accuracy are). The prediction
is the completion as it is -- the published scripts strip nothing -- unless the subclass reads it first
(:meth:`extract`, e.g. POPE's yes/no).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from eval.benchmarks import files
from eval.benchmarks.base import Benchmark, Item, Verdict

SHORT_INSTRUCTION = "Answer the question using a single word or phrase."


class ShortAnswer(Benchmark):
    """The question, then :attr:`instruction`; the completion (or what :meth:`extract` reads) is the prediction."""

    instruction: ClassVar[str] = f"\n{SHORT_INSTRUCTION}"
    """What follows the question in the official prompt (with its leading newline)."""

    def question_item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str, answer: Any,
                      fields: Mapping[str, Any] | None = None,
                      categories: Mapping[str, str | tuple[str, ...]] | None = None) -> Item:
        """The item of a row with a ``question`` and one ``image`` (bytes or a path)."""
        images, refs = files.images(raw, ("image",), folder, item_id=item_id, file_label=str(path))
        return Item(item_id, str(raw.get("question") or "").strip(), images, refs, answer, dict(fields or {}),
                    dict(categories or {}))

    @abstractmethod
    def credit(self, prediction: Any, item: Item) -> float:
        """The benchmark's score of ``prediction`` against ``item``'s answer, 0 to 1."""

    def task_question(self, item: Item) -> str:
        return item.question

    def official_prompt(self, item: Item) -> str:
        return f"{item.question}{self.instruction}"

    def extract(self, completion: str, item: Item) -> Any:
        return completion

    def score(self, extracted: Any, item: Item) -> Verdict:
        if item.answer is None:
            return Verdict(extracted, extracted, None)
        credit = self.credit(extracted, item)
        return Verdict(extracted, extracted, credit == 1.0, score=credit)

    def submission(self, item: Item, completion: str, verdict: Verdict) -> tuple[str, Any]:
        return item.id, verdict.prediction
