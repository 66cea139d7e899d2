"""RefCOCO boxes in each model family's convention, and the counting readers, against their tables."""

from __future__ import annotations

import pytest

from eval.scoring.boxes import box_in_original_pixels, coco_box, first_box, grounding_hit
from eval.scoring.counting import count_answer, r1v_count

from . import tables
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
