"""Relaxed accuracy, ChartQA's metric: numbers within 5% of the answer, anything else exact.

google-research/pix2struct ``pix2struct/metrics.py`` (``relaxed_correctness``), the rule
of the ChartQA paper (Masry et al. 2022, section 5.1: "within 5% of the gold answer ...
for non-numeric answers, we still need an exact match"), also used by Qwen-VL's
``eval_mm/evaluate_vqa.py``.
"""

from __future__ import annotations

MAX_RELATIVE_CHANGE = 0.05


def _to_float(text: str) -> float | None:
    """``text`` as Python's ``float`` reads it ("1e3", " 12 ", "nan" too), a trailing "%" dividing
    by 100; None otherwise ("1,000", "$5", "12 kg")."""
    try:
        return float(text.rstrip("%")) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        return None


def relaxed_correctness(prediction: str, target: str, max_relative_change: float = MAX_RELATIVE_CHANGE) -> bool:
    """Whether ``prediction`` counts as ``target`` under ChartQA's relaxed accuracy.

    Both read as numbers and the target is not zero: ``|p - t| / |t| <= max_relative_change``.
    Otherwise (either is not a number, or the target is 0): equal after lower-casing only --
    no stripping, no units, no thousands separators.
    """
    predicted, expected = _to_float(prediction), _to_float(target)
    if predicted is not None and expected:
        return abs(predicted - expected) / abs(expected) <= max_relative_change
    return prediction.lower() == target.lower()
