"""Overall and per-category means, unanswered items left out."""

from __future__ import annotations

import math

from eval.scoring.aggregate import summarize


def test_summary_overall_and_by_category() -> None:
    items = [
        (1.0, {"duration": "short", "task": "OCR"}),
        (0.0, {"duration": "short", "task": "Counting"}),
        (1.0, {"duration": "long", "task": "OCR"}),
        (None, {"duration": "long", "task": "OCR"}),  # unanswered (Video-MME): in no mean
    ]
    summary = summarize(items, keys=["duration", "task"])
    assert summary.overall == 2 / 3 and summary.count == 4 and summary.answered == 3
    assert summary.by["duration"] == {"short": 0.5, "long": 1.0}
    assert summary.by["task"] == {"OCR": 1.0, "Counting": 0.0}


def test_items_without_a_key_and_groups_without_answers() -> None:
    summary = summarize([(1.0, {"split": "human"}), (0.0, {}), (None, {"split": "augmented"})], keys=["split"])
    assert summary.overall == 0.5
    assert summary.by["split"]["human"] == 1.0
    assert math.isnan(summary.by["split"]["augmented"])


def test_empty_summary_is_unknown_not_zero() -> None:
    summary = summarize([])
    assert math.isnan(summary.overall) and summary.count == 0 and summary.by == {}
