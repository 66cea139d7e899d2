"""RefCOCO boxes in each model family's convention, and the counting readers, against their tables."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from eval.scoring.boxes import (
    box_in_original_pixels,
    coco_box,
    first_box,
    grounding_hit,
)
from eval.scoring.counting import count_answer, r1v_count

from . import box_references, tables
from .tables import Case

ORIGINAL, SHOWN = (1000, 500), (500, 250)


def _hit(case: Case, family: str) -> bool:
    box = first_box(case.completion, family)
    predicted = None if box is None else box_in_original_pixels(box, family, ORIGINAL, SHOWN)
    return grounding_hit(predicted, case.gold)


def test_every_table_has_twenty_tricky_rows() -> None:
    assert len(tables.REFCOCO_QWEN2_5) + len(tables.REFCOCO_QWEN2) >= 20
    assert len(tables.R1V_COUNT) >= 20 and len(tables.COUNTBENCH) >= 20


@pytest.mark.parametrize("case", tables.REFCOCO_QWEN2_5, ids=[case.why for case in tables.REFCOCO_QWEN2_5])
def test_qwen2_5_vl_boxes_in_shown_pixels(case: Case) -> None:
    assert _hit(case, "qwen2_5_vl") is case.verdict


@pytest.mark.parametrize("case", tables.REFCOCO_QWEN2, ids=[case.why for case in tables.REFCOCO_QWEN2])
def test_qwen2_vl_boxes_on_the_1000_grid(case: Case) -> None:
    assert _hit(case, "qwen2_vl") is case.verdict


def _departures(table: list[Case], reference: Callable[[str], bool]) -> set[str]:
    """The completions whose verdict under ``reference`` is not the table's."""
    return {case.completion for case in table if reference(case.completion) is not case.verdict}


def test_lmms_eval_utils_rec_differs_only_on_spaces_before_commas() -> None:
    """Its regex allows spaces after a comma only; ours around every number."""
    assert _departures(tables.REFCOCO_QWEN2_5, box_references.lmms_eval_hit) == {"[ 50 , 50 , 150 , 150 ]"}


def test_vlm_r1_differs_only_on_a_leading_dot_and_a_strict_threshold() -> None:
    """VLM-R1 reads ".5" and needs IoU > 0.5; its inclusive-pixel -1/+1 cancel (same IoU otherwise)."""
    assert _departures(tables.REFCOCO_QWEN2_5, box_references.vlmr1_hit) == {"[50, 50, 150, 100]",
                                                                             "[.5, 50, 150, 150]"}


def test_qwen_vl_differs_on_corner_separators_and_its_999_grid() -> None:
    """Qwen-VL's regex needs exactly "),(" between the corners and starts at the text's first "(", and it divides
    by 999; at /1000 only the regex differs."""
    unread_there = {"(100, 200), (300, 600)", "(100,200)(300,600)", "the dog (left one) is at (100,200),(300,600)"}
    assert _departures(tables.REFCOCO_QWEN2, box_references.qwenvl_hit) == unread_there | {"(100,200),(300,400)"}
    assert _departures(tables.REFCOCO_QWEN2, lambda text: box_references.qwenvl_hit(text, grid=1000.0)) == unread_there


def test_box_conversions() -> None:
    assert coco_box((100, 100, 200, 200)) == (100, 100, 300, 300)
    assert first_box("[1, 2, 3, 4] [5, 6, 7, 8]", "qwen2_5_vl") == (1.0, 2.0, 3.0, 4.0)
    assert box_in_original_pixels((100, 200, 300, 600), "qwen2_vl", ORIGINAL, SHOWN) == (100, 100, 300, 300)
    assert not grounding_hit(None, tables.REFCOCO_TRUTH)
    assert grounding_hit((100, 100, 300, 200), tables.REFCOCO_TRUTH)  # IoU exactly 0.5
    assert not grounding_hit((100, 100, 300, 200), tables.REFCOCO_TRUTH, threshold=0.7)
    with pytest.raises(ValueError, match="no box notation for model family 'llava'"):
        first_box("[1, 2, 3, 4]", "llava")


@pytest.mark.parametrize("case", tables.R1V_COUNT, ids=[case.why for case in tables.R1V_COUNT])
def test_r1v_count(case: Case) -> None:
    assert r1v_count(case.completion) == case.verdict


@pytest.mark.parametrize("case", tables.COUNTBENCH, ids=[case.why for case in tables.COUNTBENCH])
def test_countbench_count(case: Case) -> None:
    assert count_answer(case.completion) == case.verdict
