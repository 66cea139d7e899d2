"""Which training curves a report draws, and their smoothing: pure functions of metrics rows."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Panel:
    """One chart: a title and the metric keys drawn on it (a ``*`` stands for one key segment: ``reward/*``
    draws every ``reward/<name>`` key except the total, error counts and spreads; ``eval/*/accuracy`` every
    task's and benchmark's held-out accuracy)."""

    title: str
    keys: tuple[str, ...]
    in_markdown: bool = False
    """Also drawn as a PNG (of its first key) in report.md, for readers without the HTML page."""


PANELS: tuple[Panel, ...] = (
    Panel("Reward (weighted total)", ("reward/total",), in_markdown=True),
    Panel("Reward components", ("reward/*",)),
    Panel("Training accuracy", ("accuracy",), in_markdown=True),
    Panel("Held-out accuracy (data.test and eval.benchmarks)", ("eval/accuracy", "eval/*/accuracy")),
    Panel("KL to the reference", ("kl",), in_markdown=True),
    Panel("Policy entropy", ("entropy",), in_markdown=True),
    Panel("Clipped fraction", ("clip_frac", "clip_frac_low", "clip_frac_high")),
    Panel("Gradient norm", ("grad_norm",)),
    Panel("Completion length (tokens)", ("length/mean", "length/max"), in_markdown=True),
    Panel("Truncation rate", ("truncation_rate",)),
    Panel("Reward spread inside groups", ("reward/total_std", "zero_variance_frac")),
    Panel("Tokens per second", ("tokens_per_second",)),
    Panel("Step time split (s)", ("time/rollout", "time/reference", "time/update")),
    Panel("Async staleness", ("async/staleness_mean",)),
    Panel("Importance ratio (trainer / sampler)", ("rollout/is_ratio_mean", "rollout/is_capped_frac")),
)
SKIPPED_SUFFIXES = ("/errors", "_std")  # per-reward counts and spreads: not curves of their own


def panel_keys(panel: Panel, rows: Sequence[dict[str, Any]]) -> list[str]:
    """The panel's keys that some row has a number for (wildcards expanded, sorted)."""
    present = {key for row in rows for key, value in row.items() if _is_number(value)}
    keys: list[str] = []
    for key in panel.keys:
        if "*" in key:
            pattern = re.compile(re.escape(key).replace(r"\*", "[^/]+"))
            keys += sorted(
                k for k in present
                if pattern.fullmatch(k) and k != "reward/total" and not k.endswith(SKIPPED_SUFFIXES)
            )
        elif key in present:
            keys.append(key)
    return keys


def series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of ``key`` over the rows that have a finite number for it."""
    points = [(float(row["step"]), float(row[key])) for row in rows if _is_number(row.get(key)) and "step" in row]
    return [p[0] for p in points], [p[1] for p in points]


def ema(values: Sequence[float], weight: float) -> list[float]:
    """Exponential moving average with bias correction (TensorBoard's smoothing): ``weight`` in [0, 1),
    0 returns the values. The first point is the first value, not pulled toward 0."""
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    smoothed, running, debias = [], 0.0, 1.0
    for value in values:
        running = weight * running + (1 - weight) * value
        debias *= weight
        smoothed.append(running / (1 - debias))
    return smoothed


def smoothing_weight(points: int) -> float:
    """A weight that smooths over about 5% of the run (none for runs under 20 points)."""
    window = points / 20
    return 0.0 if window < 1 else 1 - 1 / window


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
