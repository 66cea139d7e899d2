"""The grounding rules of three published evaluations, restated from reading them, to pin where ours differ.

RefCOCO has no single published protocol for these model families (``docs/benchmark_scoring.md``,
"Where we depart"). Each function here gives one evaluation's verdict on a completion for the table
geometry of ``tables.py``: an original 1000x500 image shown at 500x250, the annotation
:data:`tables.REFCOCO_TRUTH` in original pixels. A reading that finds no box gives the zero box,
as all three do.

- lmms-eval ``lmms_eval/tasks/refcoco/utils_rec.py``: the first ``[a, b, c, d]`` whose numbers may
  have spaces after, not before, a comma; continuous IoU >= 0.5.
- VLM-R1 ``src/eval/test_rec_baseline.py``: the first ``[a, b, c, d]`` with numbers like ``-?\\d*\\.?\\d+``
  (so ``.5`` reads), spaces allowed around them; its IoU subtracts 1 from the far corners and adds 1 to
  the overlap's sides (they cancel; an overlap of 1 pixel or less counts as none); a hit is IoU > 0.5.
- Qwen-VL ``eval_mm/evaluate_grounding.py``: ``\\((.*?)\\),\\((.*?)\\)`` (the corners joined by exactly
  "),("), each corner two comma-separated numbers on a grid divided by 999; IoU >= 0.5.
"""

from __future__ import annotations

import re

from tasks.grounding import Box

from . import tables

ORIGINAL, SHOWN = (1000, 500), (500, 250)
ZERO: Box = (0.0, 0.0, 0.0, 0.0)
_LMMS_BOX = re.compile(r"\[\s*(-?\d+(?:\.\d+)?),\s*(-?\d+(?:\.\d+)?),\s*(-?\d+(?:\.\d+)?),\s*(-?\d+(?:\.\d+)?)\s*\]")
_VLMR1_NUMBER = r"\s*(-?\d*\.?\d+)\s*"
_VLMR1_BOX = re.compile(rf"\[{_VLMR1_NUMBER},{_VLMR1_NUMBER},{_VLMR1_NUMBER},{_VLMR1_NUMBER}\]")
_QWENVL_CORNERS = re.compile(r"\((.*?)\),\((.*?)\)")


def _first(pattern: re.Pattern[str], text: str) -> Box:
    found = pattern.search(text)
    return ZERO if found is None else tuple(float(value) for value in found.groups())


def _shown_to_original(box: Box) -> Box:
    x_scale, y_scale = ORIGINAL[0] / SHOWN[0], ORIGINAL[1] / SHOWN[1]
    return (box[0] * x_scale, box[1] * y_scale, box[2] * x_scale, box[3] * y_scale)


def _areas(a: Box, b: Box) -> float:
    return (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])


def _continuous_iou(a: Box, b: Box) -> float:
    """Overlap clamped at 0 over the union of the two (unclamped) areas."""
    overlap = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return overlap / (_areas(a, b) - overlap)


def _vlmr1_iou(a: Box, b: Box) -> float:
    """VLM-R1's IoU: inclusive-pixel corrections that cancel, and no overlap unless it is over 1 pixel."""
    left, top = max(a[0], b[0]), max(a[1], b[1])
    right, bottom = min(a[2] - 1, b[2] - 1), min(a[3] - 1, b[3] - 1)
    overlap = (right - left + 1) * (bottom - top + 1) if left < right and top < bottom else 0.0
    return overlap / (_areas(a, b) - overlap)


def lmms_eval_hit(completion: str) -> bool:
    """lmms-eval ``utils_rec.py``'s verdict on a Qwen2.5-VL completion (pixels of the shown image)."""
    return _continuous_iou(_shown_to_original(_first(_LMMS_BOX, completion)), tables.REFCOCO_TRUTH) >= 0.5


def vlmr1_hit(completion: str) -> bool:
    """VLM-R1 ``test_rec_baseline.py``'s verdict on a Qwen2.5-VL completion (pixels of the shown image)."""
    return _vlmr1_iou(_shown_to_original(_first(_VLMR1_BOX, completion)), tables.REFCOCO_TRUTH) > 0.5


def _qwenvl_box(completion: str) -> Box:
    """The first corner pair as Qwen-VL reads it: two comma-separated numbers in each, else the zero box."""
    found = _QWENVL_CORNERS.search(completion)
    if found is None:
        return ZERO
    try:
        (x1, y1), (x2, y2) = ([float(value) for value in corner.split(",")] for corner in found.groups())
    except ValueError:
        return ZERO
    return (x1, y1, x2, y2)


def qwenvl_hit(completion: str, grid: float = 999.0) -> bool:
    """Qwen-VL ``evaluate_grounding.py``'s verdict on a corner-pair completion, its grid divided by ``grid``."""
    x1, y1, x2, y2 = _qwenvl_box(completion)
    width, height = ORIGINAL[0] / grid, ORIGINAL[1] / grid
    return _continuous_iou((x1 * width, y1 * height, x2 * width, y2 * height), tables.REFCOCO_TRUTH) >= 0.5
