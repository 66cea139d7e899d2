"""Average normalised Levenshtein similarity (ANLS), DocVQA's metric.

The Robust Reading Competition's script for DocVQA/InfographicVQA (published with the
datasets at rrc.cvc.uab.es; a copy is QwenLM/Qwen-VL ``eval_mm/infographicsvqa_eval.py``):
per question, the best over the ground-truth answers of ``1 - NL``, and 0 when that best
is below the threshold 0.5 (so a normalised distance of exactly 0.5 still scores 0.5).
"""

from __future__ import annotations

from collections.abc import Sequence

ANLS_THRESHOLD = 0.5


def levenshtein(a: str, b: str) -> int:
    """The edit distance between ``a`` and ``b`` (insertions, deletions, substitutions; cost 1 each)."""
    if len(a) > len(b):
        a, b = b, a
    previous = list(range(len(a) + 1))
    for row, char_b in enumerate(b, start=1):
        current = [row]
        for column, char_a in enumerate(a, start=1):
            current.append(min(previous[column] + 1, current[-1] + 1, previous[column - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def _normalised_distance(prediction: str, answer: str) -> float:
    """The script's NL: the distance between the lower-cased, whitespace-collapsed texts over
    the length of the longer RAW text (as upper-cased: ``"ß"`` counts 2), 0 when both are empty."""
    distance = levenshtein(" ".join(answer.lower().split()), " ".join(prediction.lower().split()))
    length = max(len(answer.upper()), len(prediction.upper()))
    return distance / length if length else 0.0


def anls(prediction: str, answers: Sequence[str], threshold: float = ANLS_THRESHOLD) -> float:
    """ANLS of one prediction against a question's ground-truth ``answers`` (0 to 1)."""
    if not answers:
        raise ValueError("ANLS needs at least one ground-truth answer")
    best = 1 - min(_normalised_distance(prediction, answer) for answer in answers)
    return 0.0 if best < threshold else best
