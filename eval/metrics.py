"""Pure statistics of an evaluation: pass@k, mean@k and confidence intervals.

No model, no I/O: lists of per-item scores in, numbers out. Intervals are two-sided at
``confidence`` (0.95 by default) so two checkpoints can be compared honestly: the Wilson
score interval for 0/1 scores (accurate even near 0% or 100% and for small n, unlike the
normal approximation), a seeded percentile bootstrap of the mean for anything else
(mean IoU, per-item pass@k estimates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 1000


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; NaN for no values (an empty task is "unknown", not 0%)."""
    return float(sum(values) / len(values)) if values else math.nan


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one item from ``n`` sampled completions of which ``c`` are correct.

    Chen et al. 2021 (Codex), eq. 1: ``1 - C(n-c, k) / C(n, k)``, the chance that a random
    size-``k`` subset of the ``n`` completions holds at least one correct one. When
    ``n - c < k`` every subset does, so it is 1. Exact integer binomials, no overflow.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_at_k(scores: Sequence[float]) -> float:
    """mean@k of one item: the average score of its k sampled completions."""
    if not scores:
        raise ValueError("mean@k needs at least one completion score")
    return mean(scores)


def pass_at_k_levels(n: int) -> list[int]:
    """The k reported for ``n`` samples per item: powers of two below ``n``, then ``n`` itself."""
    levels = [1 << power for power in range(n.bit_length()) if 1 << power < n]
    return [*levels, n]


def z_score(confidence: float) -> float:
    """The two-sided standard-normal quantile for ``confidence`` (0.95 -> 1.96)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(
    successes: float, n: int, *, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float]:
    """Wilson score interval of a success rate ``successes / n``; (NaN, NaN) when ``n`` is 0.

    centre = (p + z²/2n) / (1 + z²/n), half-width = z / (1 + z²/n) * sqrt(p(1-p)/n + z²/4n²).
    """
    if n == 0:
        return math.nan, math.nan
    if not 0 <= successes <= n:
        raise ValueError(f"Wilson interval needs 0 <= successes <= n, got {successes} of {n}")
    z = z_score(confidence)
    p = successes / n
    shrink = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / shrink
    half_width = z / shrink * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # The interval contains p; clamping keeps rounding (e.g. a 1e-17 lower bound at p = 0) out.
    return max(0.0, min(p, centre - half_width)), min(1.0, max(p, centre + half_width))


def bootstrap_interval(
    values: Sequence[float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values``; (NaN, NaN) when empty.

    Seeded, so the same scores always give the same interval.
    """
    if not values:
        return math.nan, math.nan
    z_score(confidence)  # validates the level
    data = np.asarray(values, dtype=np.float64)  # [n]
    rows = np.random.default_rng(seed).integers(0, len(data), size=(resamples, len(data)))  # [R, n]
    means = data[rows].mean(axis=1)  # [R]
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def confidence_interval(
    values: Sequence[float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Interval of the mean of per-item ``values``: Wilson when all are 0 or 1, else bootstrap."""
    if all(value in (0.0, 1.0) for value in values):
        return wilson_interval(sum(values), len(values), confidence=confidence)
    return bootstrap_interval(values, confidence=confidence, resamples=resamples, seed=seed)
