"""POPE and MME: yes/no reading against their tables, and their aggregate metrics by hand."""

from __future__ import annotations

import math

import pytest

from eval.scoring.binary import mme_answer, mme_scores, pope_answer, pope_by_split, pope_metrics

from . import tables
from .tables import Case


@pytest.mark.parametrize("table", [tables.POPE, tables.MME])
def test_every_table_has_twenty_tricky_rows(table: list[Case]) -> None:
    assert len(table) >= 20


@pytest.mark.parametrize("case", tables.POPE, ids=[case.why for case in tables.POPE])
def test_pope_reading(case: Case) -> None:
    assert pope_answer(case.completion) == case.verdict


@pytest.mark.parametrize("case", tables.MME, ids=[case.why for case in tables.MME])
def test_mme_reading(case: Case) -> None:
    assert mme_answer(case.completion) == case.verdict


def test_pope_metrics_by_hand() -> None:
    # TP = 2 (items 0, 4), FP = 1 (item 1), TN = 2 (items 2, 5), FN = 1 (item 3)
    metrics = pope_metrics(["yes", "yes", "no", "no", "yes", "no"], ["yes", "no", "no", "yes", "yes", "no"])
    assert metrics.accuracy == pytest.approx(4 / 6)
    assert metrics.precision == pytest.approx(2 / 3)
    assert metrics.recall == pytest.approx(2 / 3)
    assert metrics.f1 == pytest.approx(2 / 3)
    assert metrics.yes_ratio == pytest.approx(3 / 6)
    assert metrics.count == 6


def test_pope_metrics_where_the_published_script_divides_by_zero() -> None:
    never_yes = pope_metrics(["no", "no"], ["yes", "no"])
    assert math.isnan(never_yes.precision) and never_yes.recall == 0.0 and never_yes.f1 == 0.0
    no_positive_label = pope_metrics(["no"], ["no"])
    assert math.isnan(no_positive_label.recall) and math.isnan(no_positive_label.f1)
    with pytest.raises(ValueError, match="2 predictions but 1 labels"):
        pope_metrics(["yes", "no"], ["yes"])


def test_pope_by_split_keeps_splits_apart() -> None:
    items = [("random", "yes", "yes"), ("adversarial", "yes", "no"), ("random", "no", "no"), ("adversarial", "no", "no")]
    by_split = pope_by_split(items)
    assert list(by_split) == ["random", "adversarial"]
    assert by_split["random"].accuracy == 1.0 and by_split["random"].yes_ratio == 0.5
    assert by_split["adversarial"].accuracy == 0.5 and by_split["adversarial"].precision == 0.0


def test_pope_table_as_one_split() -> None:
    predictions = [pope_answer(case.completion) for case in tables.POPE]
    labels = [case.gold for case in tables.POPE]
    metrics = pope_metrics(predictions, labels)
    assert metrics.yes_ratio == pytest.approx(predictions.count("yes") / len(predictions))
    assert metrics.accuracy == pytest.approx(sum(p == g for p, g in zip(predictions, labels)) / len(labels))


def test_mme_scores_by_hand() -> None:
    items = [
        ("existence", "1.jpg", True), ("existence", "1.jpg", True),  # both right
        ("existence", "2.jpg", True), ("existence", "2.jpg", False),  # one right
        ("count", "3.jpg", False), ("count", "3.jpg", False),
        ("commonsense_reasoning", "4.jpg", True), ("commonsense_reasoning", "4.jpg", True),
    ]
    scores = mme_scores(items)
    existence = scores.subtasks["existence"]
    assert (existence.acc, existence.acc_plus, existence.score) == (75.0, 50.0, 125.0)
    assert scores.subtasks["count"].score == 0.0
    assert scores.perception == 125.0
    assert scores.cognition == 200.0


def test_mme_refuses_unknown_subtasks_and_unpaired_images() -> None:
    with pytest.raises(ValueError, match="unknown MME subtask 'colour'"):
        mme_scores([("colour", "1.jpg", True)])
    with pytest.raises(ValueError, match="every image needs 2 questions"):
        mme_scores([("OCR", "1.jpg", True), ("OCR", "1.jpg", True), ("OCR", "1.jpg", False)])
