"""What a benchmark is: its published files -> items, its official prompt, its answer reading and scoring.

A benchmark is one module in ``eval/benchmarks/`` holding a :class:`Benchmark` subclass and
one ``BENCHMARKS.add`` line per published split (``mathvista_testmini``, ``mathvista_test``).
The pieces follow the benchmark's own evaluation code, in the order it runs them:

- ``read(path, split)``: the files as the benchmark publishes them -> :class:`Item` rows (its own
  ids, media, answer, category labels), one ``item(raw, ...)`` per row; a row that cannot be used
  is a ``SkippedRow`` with the reason;
- ``official_prompt(item)``: the prompt its paper/code sends to a model;
- ``extract(completion, item)``: what the completion answers, as its code reads it;
- ``score(extracted, item)``: :class:`Verdict` (the normalised prediction and whether it is right);
- ``submission(...)``: the file a leaderboard takes when the split's answers are hidden;
- ``aggregate(scored)``: numbers the benchmark reports beyond means of item scores (POPE's
  precision/recall/F1 per split, MME's acc+ and perception/cognition totals); none by default.

Categories (subject, skill, ...) are labels on each item; results are aggregated over all items
and per label value, micro-averaged as the papers report them. An item scores its ``Verdict``'s
``metric``: 1/0 for right/wrong, or the benchmark's partial credit (ANLS, VQA accuracy).
"""

from __future__ import annotations

import dataclasses
import math
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from data_recipes.adapters.base import BadRow
from eval.benchmarks import files
from mmgrpo.registry import Registry
from mmgrpo.skipped_rows import SkippedRow
from tasks.base import ANSWER_INSTRUCTION, THINK_INSTRUCTION, ModelInfo

PromptStyle = Literal["official", "task"]
Ask = Callable[[list[str]], list[str]]
"""A judge model: questions in, its replies out (``eval.judge``)."""
JUDGE_NOTE = "judge-extracted"
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class Item:
    """One benchmark question as published."""

    id: str
    """The benchmark's own id (MathVista ``pid``, MMMU ``id``): what submissions and predictions name."""
    question: str
    images: tuple[Any, ...]
    """Resolved image references (absolute paths or bytes), in prompt order."""
    media_refs: tuple[str, ...]
    """Printable references to the same images: a path, or ``<file>#<id>/<column>`` for embedded bytes."""
    answer: Any
    """Ground truth; None when the split hides it (a submission is written instead of a score)."""
    fields: Mapping[str, Any] = field(default_factory=dict)
    """What the benchmark's prompt and scorer read (choices, answer type, precision, ...)."""
    categories: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    """Category key -> label (or several, e.g. MathVista's skills) for per-category results."""
    videos: tuple[Any, ...] = ()
    """Resolved video references (a file path, a clip's frame paths in order, or a ``VideoSpan`` of a file for a
    question about part of it), shown after the images; ``media_refs`` names them after the images' references."""


@dataclass(frozen=True)
class Verdict:
    """How the benchmark's scorer judged one completion."""

    extracted: Any
    """What was read from the completion, before normalisation."""
    prediction: Any
    """The normalised prediction the scorer compares with the answer."""
    correct: bool | None
    """None when the answer is hidden."""
    note: str = ""
    """How the answer was read when not plainly (e.g. ``random choice``: nothing parseable)."""
    score: float | None = None
    """Partial credit in [0, 1] where the benchmark gives it (ANLS, VQA accuracy; ``correct`` is then
    full credit); None: the score is 1 or 0 by ``correct``."""

    @property
    def metric(self) -> float:
        """The item's score: partial credit, else 1.0/0.0 by ``correct``; NaN when the answer is hidden."""
        if self.correct is None:
            return math.nan
        return float(self.correct) if self.score is None else self.score


Scored = tuple[Item, Any, float]
"""One scored item: the item, the prediction read from its first completion (``Verdict.prediction`` as
JSON data) and its metric -- what :meth:`Benchmark.aggregate` reads."""


class Benchmark(ABC):
    """Base class of a benchmark; instances are registered per split in :data:`BENCHMARKS`."""

    max_new_tokens: ClassVar[int]
    """The generation limit of the benchmark's reference evaluation."""
    task_max_new_tokens: ClassVar[int] = 1024
    """The limit under the ``task`` prompt style, where the model reasons inside ``<think>`` first."""
    layout: ClassVar[str]
    """Which published dataset to download and the folder layout ``read`` expects (for docs and errors)."""
    system: ClassVar[str | None] = None
    """The system message of the official prompt, where the benchmark's reference sends one (MVBench)."""

    def __init__(self, name: str, split: str) -> None:
        self.name, self.split = name, split

    id_column: ClassVar[str | None]
    """The column holding the benchmark's own item id; None where it publishes none (the row number is the id)."""

    def read(self, path: str, split: str) -> tuple[list[Item], list[SkippedRow]]:
        """The items of ``split`` under ``path`` and the rows skipped (with the reason), in file order."""
        rows, folder = files.records(path, split)
        return self.read_rows(rows, folder, path)

    def read_rows(
        self, rows: Iterable[Mapping[str, Any]], folder: Path | None, path: str
    ) -> tuple[list[Item], list[SkippedRow]]:
        """Published ``rows`` (media relative to ``folder``) as items, and the rows skipped.

        An id the file repeats (MME names both questions of an image by the image) is ``<id>#<k>`` at its
        k-th occurrence (k >= 2), so every item has its own id in predictions and samples."""
        items, skipped = [], []
        seen: Counter[str] = Counter()
        for index, raw in enumerate(rows):
            value = raw.get(self.id_column) if self.id_column else None
            published = str(index if value in (None, "") else value)
            seen[published] += 1
            item_id = published if seen[published] == 1 else f"{published}#{seen[published]}"
            try:
                items.append(self.item(raw, item_id, folder, path))
            except BadRow as error:
                skipped.append(SkippedRow(item_id, path, error.reason, error.detail))
        return items, skipped

    def for_model(self, model: ModelInfo) -> Benchmark:
        """This benchmark as it asks and scores ``model``; the same one unless its prompt or scoring depends on
        the model (RefCOCO reads boxes in the model family's coordinates, in the image size the model saw;
        Video-MME's subtitles are those at the frames the model sees)."""
        return self

    @abstractmethod
    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        """One published row as an :class:`Item` (media resolved against ``folder``); ``BadRow`` if unusable."""

    @abstractmethod
    def official_prompt(self, item: Item) -> str:
        """The text the benchmark's reference evaluation asks with (its images go before it)."""

    @abstractmethod
    def task_question(self, item: Item) -> str:
        """The question with its options, for the trained task's ``<think>``/``<answer>`` prompt."""

    @abstractmethod
    def extract(self, completion: str, item: Item) -> Any:
        """What ``completion`` answers, read as the benchmark's code reads it."""

    @abstractmethod
    def score(self, extracted: Any, item: Item) -> Verdict:
        """The benchmark's verdict on an extracted answer."""

    def judge_question(self, completion: str, item: Item) -> str | None:
        """What to ask a judge model to extract the answer, where the benchmark's reference asks one and
        its rule-based steps did not read ``completion``; None (the default): the rules decide."""
        return None

    @abstractmethod
    def submission(self, item: Item, completion: str, verdict: Verdict) -> tuple[str, Any]:
        """One entry (key, value) of the file the benchmark's leaderboard takes."""

    def aggregate(self, scored: Sequence[Scored]) -> dict[str, float]:
        """Numbers the benchmark reports beyond the mean score overall and per category label (which every
        benchmark gets), by name; reported as ``<benchmark>/<name>``. None by default."""
        return {}

    # -- shared behaviour -------------------------------------------------------------
    def prompt(self, item: Item, style: PromptStyle = "official", *, think: bool = True) -> str:
        """The official prompt, or (``task``) the question in the trained task's answer format
        (``<think>`` then ``<answer>``, or ``<answer>`` only when the task was trained without thinking)."""
        if style == "official":
            return self.official_prompt(item)
        return f"{self.task_question(item)}\n{THINK_INSTRUCTION if think else ANSWER_INSTRUCTION}"

    def generation_limit(self, style: PromptStyle) -> int:
        return self.max_new_tokens if style == "official" else max(self.max_new_tokens, self.task_max_new_tokens)

    def judge(self, completion: str, item: Item, style: PromptStyle = "official", ask: Ask | None = None) -> Verdict:
        """Extract then score; under the ``task`` style the last ``<answer>`` tag's content is what is read.
        With ``ask`` (a judge model) an answer the rules cannot read is extracted by it, noted ``judge-extracted``."""
        if style == "task":
            tagged = _ANSWER_TAG.findall(completion)
            completion = tagged[-1].strip() if tagged else completion
        question = self.judge_question(completion, item) if ask is not None else None
        if question is None:
            return self.score(self.extract(completion, item), item)
        verdict = self.score(ask([question])[0].strip(), item)
        return dataclasses.replace(verdict, note="; ".join(filter(None, [JUDGE_NOTE, verdict.note])))


BENCHMARKS: Registry[Benchmark] = Registry("benchmark")


def hidden(answer: Any) -> bool:
    """Whether a published answer is a placeholder for a hidden one (test splits)."""
    return answer is None or (isinstance(answer, str) and answer.strip() in ("", "?"))


def category_labels(values: Mapping[str, Any], keys: Sequence[str]) -> dict[str, str | tuple[str, ...]]:
    """The category labels among ``keys`` that ``values`` has (lists become tuples; missing ones are left out)."""
    labels: dict[str, str | tuple[str, ...]] = {}
    for key in keys:
        value = values.get(key)
        if isinstance(value, (list, tuple)):
            labels[key] = tuple(str(v) for v in value)
        elif value not in (None, ""):
            labels[key] = str(value)
    return labels
