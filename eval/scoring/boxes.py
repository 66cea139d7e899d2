"""Referring-expression grounding (RefCOCO, RefCOCO+, RefCOCOg): a box out of text, then IoU >= 0.5.

A box is read in the convention of the model family that wrote it (see
:data:`tasks.grounding.FAMILY_COORDINATES`): Qwen2.5-VL writes ``[x1, y1, x2, y2]`` (also
inside its ``[{"bbox_2d": [...], "label": ...}]`` JSON) in pixels of the image it was shown,
after resizing; Qwen2-VL writes ``(x1,y1),(x2,y2)`` (inside ``<|box_start|>...<|box_end|>``)
on a 0-1000 grid (normalized to [0, 1000) in its technical report, so divided by 1000). The box
is mapped to pixels of the original image and compared with the annotation. A hit is IoU >= 0.5,
the RefCOCO protocol (lichengunc/refer, MAttNet's ``eval`` scripts; lmms-eval
``refcoco/utils_rec.py`` ``compute_accuracy`` alike). As in those scripts, the FIRST box of the
answer is the prediction. No published script reads both families; where lmms-eval, VLM-R1 and
Qwen-VL's scripts read or threshold differently is listed in ``docs/benchmark_scoring.md``.
"""

from __future__ import annotations

import re

from tasks.grounding import FAMILY_COORDINATES, Box, Size, box_iou, to_original_pixels

IOU_THRESHOLD = 0.5
_NUMBER = r"\s*(-?\d+(?:\.\d+)?)\s*"
_FAMILY_BOX = {
    "qwen2_5_vl": re.compile(rf"\[{_NUMBER},{_NUMBER},{_NUMBER},{_NUMBER}\]"),
    "qwen2_vl": re.compile(rf"\({_NUMBER},{_NUMBER}\)\s*,?\s*\({_NUMBER},{_NUMBER}\)"),
}


def first_box(text: str, family: str) -> Box | None:
    """The first box ``text`` writes in ``family``'s notation (model units), or None."""
    pattern = _FAMILY_BOX.get(family)
    if pattern is None:
        raise ValueError(f"no box notation for model family {family!r}; known: {sorted(_FAMILY_BOX)}")
    found = pattern.search(text)
    return None if found is None else tuple(float(value) for value in found.groups())


def box_in_original_pixels(box: Box, family: str, original_size: Size, resized_size: Size) -> Box:
    """``box`` as ``family`` writes it, in pixels of the original ``original_size`` image that
    the model saw at ``resized_size`` (both ``(width, height)``)."""
    return to_original_pixels(box, FAMILY_COORDINATES[family], original_size, resized_size)


def coco_box(xywh: tuple[float, float, float, float]) -> Box:
    """A COCO/refer annotation box ``[x, y, width, height]`` as ``(x1, y1, x2, y2)``."""
    x, y, width, height = xywh
    return (x, y, x + width, y + height)


def grounding_hit(predicted: Box | None, truth: Box, threshold: float = IOU_THRESHOLD) -> bool:
    """Whether ``predicted`` (original pixels; None = no box) has IoU >= ``threshold`` with ``truth``."""
    return predicted is not None and box_iou(predicted, truth) >= threshold
