"""Overall and per-category means of item scores, as the benchmarks report them.

Every benchmark here reports a plain (micro) mean over its items, overall and within each
category (MMStar's category and l2-category, MVBench's 20 tasks, Video-MME's durations
and task types, ChartQA's human/augmented splits). An item whose score is ``None`` is
unanswered and left out of every mean: Video-MME's ``eval_your_results.py`` divides by the
answered questions only. Every other benchmark's scorer gives unreadable answers 0.0.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

Item = tuple[float | None, Mapping[str, str]]  # (score or None = unanswered, {category key: value})


@dataclass(frozen=True)
class Summary:
    """The overall mean, the item counts, and the mean of each value of each category key."""

    overall: float  # NaN when no item was answered
    count: int
    answered: int
    by: dict[str, dict[str, float]]


def _mean(scores: Sequence[float]) -> float:
    return sum(scores) / len(scores) if scores else math.nan


def summarize(items: Iterable[Item], keys: Sequence[str] = ()) -> Summary:
    """Means of ``items`` overall and by each of ``keys`` (values in first-seen order).

    An item lacking a key is left out of that key's breakdown only.
    """
    items = list(items)
    answered = [score for score, _ in items if score is not None]
    by: dict[str, dict[str, list[float]]] = {key: defaultdict(list) for key in keys}
    for score, categories in items:
        for key in keys:
            if key in categories:
                values = by[key][categories[key]]
                if score is not None:
                    values.append(score)
    return Summary(
        overall=_mean(answered),
        count=len(items),
        answered=len(answered),
        by={key: {value: _mean(scores) for value, scores in groups.items()} for key, groups in by.items()},
    )
