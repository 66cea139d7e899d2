"""Yes/no benchmarks: POPE and MME answer parsing and their aggregate metrics.

POPE: AoiDragon/POPE ``evaluate.py``. MME: ``eval_tool/calculation.py``, the scorer its authors
(BradyFU) distribute with the benchmark (as republished, e.g., in zjunlp/Deco ``eval_tool/calculation.py``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

YesNo = Literal["yes", "no"]
MmeAnswer = Literal["yes", "no", "other"]

MME_PERCEPTION = (
    "existence", "count", "position", "color", "posters", "celebrity", "scene", "landmark", "artwork", "OCR",
)
MME_COGNITION = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")
MME_QUESTIONS_PER_IMAGE = 2


def pope_answer(prediction: str) -> YesNo:
    """POPE's reading of an answer: "no" if its first sentence has the word No, no or not; else "yes".

    AoiDragon/POPE ``evaluate.py``: keep the text before the first period, delete commas,
    split on single spaces; "No", "no" or "not" as a word -> "no". Everything else,
    unparseable text included, is "yes" ("NO", "Nope", "no\\n" too: case and whitespace count).
    """
    sentence = prediction.split(".")[0].replace(",", "")
    words = sentence.split(" ")
    return "no" if {"No", "no", "not"} & set(words) else "yes"


def _ratio(numerator: int, denominator: int) -> float:
    """``numerator / denominator``, NaN when undefined (where the published script divides by zero)."""
    return numerator / denominator if denominator else math.nan


@dataclass(frozen=True)
class PopeMetrics:
    """POPE's numbers for one split; "yes" is the positive class."""

    accuracy: float
    precision: float  # NaN when nothing was answered "yes"
    recall: float  # NaN when no label is "yes"
    f1: float  # 2TP / (2TP + FP + FN); NaN when that is 0 / 0
    yes_ratio: float  # share of PREDICTIONS that are "yes"
    count: int


def pope_metrics(predictions: Sequence[YesNo], labels: Sequence[YesNo]) -> PopeMetrics:
    """POPE's accuracy, precision, recall, F1 and yes-ratio of parsed ``predictions`` against ``labels``."""
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions but {len(labels)} labels")
    pairs = list(zip(predictions, labels))
    tp = pairs.count(("yes", "yes"))
    fp = pairs.count(("yes", "no"))
    tn = pairs.count(("no", "no"))
    fn = pairs.count(("no", "yes"))
    return PopeMetrics(
        accuracy=_ratio(tp + tn, len(pairs)),
        precision=_ratio(tp, tp + fp),
        recall=_ratio(tp, tp + fn),
        f1=_ratio(2 * tp, 2 * tp + fp + fn),
        yes_ratio=_ratio(tp + fp, len(pairs)),
        count=len(pairs),
    )


def pope_by_split(items: Iterable[tuple[str, YesNo, YesNo]]) -> dict[str, PopeMetrics]:
    """:func:`pope_metrics` per split (``random``, ``popular``, ``adversarial``) of
    ``(split, parsed prediction, label)`` items, splits in first-seen order."""
    grouped: dict[str, tuple[list[YesNo], list[YesNo]]] = defaultdict(lambda: ([], []))
    for split, prediction, label in items:
        grouped[split][0].append(prediction)
        grouped[split][1].append(label)
    return {split: pope_metrics(predictions, labels) for split, (predictions, labels) in grouped.items()}


def mme_answer(prediction: str) -> MmeAnswer:
    """MME's reading of an answer (``calculation.py``, ``parse_pred_ans`` after ``lower()``).

    "yes"/"no" exactly; else "yes" if the first four characters hold "yes", "no" if they
    hold "no" ("not ", "none", "nope" too), else "other" (scored wrong). Nothing is
    stripped: "  yes" (two leading spaces) is "other".
    """
    text = prediction.lower()
    if text in ("yes", "no"):
        return text  # type: ignore[return-value]
    head = text[:4]
    return "yes" if "yes" in head else "no" if "no" in head else "other"


@dataclass(frozen=True)
class MmeSubtask:
    """One MME subtask: accuracy over questions and accuracy+ over images (both in percent), and their sum."""

    acc: float
    acc_plus: float
    score: float


@dataclass(frozen=True)
class MmeScores:
    """MME's report: every subtask, and the perception (10 subtasks, max 2000) and cognition (4, max 800) totals."""

    subtasks: dict[str, MmeSubtask]
    perception: float
    cognition: float


def mme_scores(items: Iterable[tuple[str, str, bool]]) -> MmeScores:
    """MME's scores from ``(subtask, image id, correct)`` items, two questions per image.

    ``calculation.py``: per subtask, acc = 100 x correct questions / questions, acc+ = 100 x
    images with both questions right / images, score = acc + acc+; the perception and
    cognition totals sum their subtasks' scores (a subtask with no items adds 0).
    """
    images: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for subtask, image, correct in items:
        if subtask not in MME_PERCEPTION + MME_COGNITION:
            raise ValueError(f"unknown MME subtask {subtask!r}; known: {MME_PERCEPTION + MME_COGNITION}")
        images[subtask][image].append(bool(correct))
    subtasks = {name: _mme_subtask(name, by_image) for name, by_image in images.items()}
    return MmeScores(
        subtasks=subtasks,
        perception=sum(subtasks[name].score for name in MME_PERCEPTION if name in subtasks),
        cognition=sum(subtasks[name].score for name in MME_COGNITION if name in subtasks),
    )


def _mme_subtask(name: str, by_image: dict[str, list[bool]]) -> MmeSubtask:
    """One subtask's acc, acc+ and score; every image must have exactly two questions."""
    uneven = {image: len(answers) for image, answers in by_image.items() if len(answers) != MME_QUESTIONS_PER_IMAGE}
    if uneven:
        raise ValueError(f"MME {name}: every image needs {MME_QUESTIONS_PER_IMAGE} questions, got {uneven}")
    answers = [correct for pair in by_image.values() for correct in pair]
    acc = 100.0 * sum(answers) / len(answers)
    acc_plus = 100.0 * sum(all(pair) for pair in by_image.values()) / len(by_image)
    return MmeSubtask(acc=acc, acc_plus=acc_plus, score=acc + acc_plus)
