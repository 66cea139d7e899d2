"""Benchmarks answered with an option letter (MMStar, AI2D, ScienceQA-IMG): lettered options in the
prompt, a letter read from the completion by the benchmark's own reader, right when it is the answer's.

A subclass reads its rows into items whose ``fields["options"]`` maps each letter to its option text
(in the order shown) and whose answer is a letter, and names its reader (:meth:`read_letter`). An
answer its reader cannot read scores wrong and is noted ``unread``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from data_recipes.adapters.base import BadRow
from eval.benchmarks.base import Benchmark, Item, Verdict
from eval.scoring.choice import option_letters

MC_INSTRUCTION = "Answer with the option's letter from the given choices directly."
UNREAD = "unread"


def lettered(options: Sequence[Any]) -> dict[str, str]:
    """Options in the order published, keyed ``A``, ``B``, ..."""
    return dict(zip(option_letters(len(options)), (str(option) for option in options)))


def row_options(raw: Mapping[str, Any], column: str) -> dict[str, str]:
    """The row's options in ``column``, lettered; ``BadRow`` naming the column when there are none."""
    options = lettered(raw.get(column) or [])
    if not options:
        raise BadRow("missing field", repr(column))
    return options


def answer_letter(index: Any, options: dict[str, str]) -> str:
    """The letter of the right option from its published index (0-based; an int or its string)."""
    try:
        return list(options)[int(index)]
    except (TypeError, ValueError, IndexError):
        raise BadRow("bad field", f"answer index {index!r} for {len(options)} options") from None


class LetterChoice(Benchmark):
    """A multiple-choice benchmark: ``question``, options as ``A. text`` lines, then :attr:`instruction`."""

    instruction: ClassVar[str] = f"\n{MC_INSTRUCTION}"
    """What follows the question and options in the official prompt (with its leading newline)."""

    @abstractmethod
    def read_letter(self, completion: str, item: Item) -> str | None:
        """The letter the benchmark's reader finds in ``completion``; None when it finds none."""

    def task_question(self, item: Item) -> str:
        options = "\n".join(f"{letter}. {text}" for letter, text in item.fields["options"].items())
        return f"{item.question}\n{options}"

    def official_prompt(self, item: Item) -> str:
        return f"{self.task_question(item)}{self.instruction}"

    def extract(self, completion: str, item: Item) -> str | None:
        return self.read_letter(completion, item)

    def score(self, extracted: str | None, item: Item) -> Verdict:
        correct = None if item.answer is None else extracted == item.answer
        return Verdict(extracted, extracted, correct, "" if extracted is not None else UNREAD)

    def submission(self, item: Item, completion: str, verdict: Verdict) -> tuple[str, Any]:
        return item.id, verdict.prediction
