"""Score completions with named, weighted reward functions; keep every component.

``total[i] = sum_k weight_k * component_k[i]`` over the components that apply to item
``i``: a ``None`` (not applicable) is left out of that item's sum, as in TRL. An item no
component applies to scores 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from mmgrpo.types import Sample
from tasks.registry import REWARDS


@dataclass
class RewardBreakdown:
    """Weighted total per completion and each named component's raw values."""

    total: list[float]
    components: dict[str, list[float | None]]

    def means(self) -> dict[str, float]:
        """Mean of each component over the items it applies to (NaN if none), and of the total."""
        summary = {}
        for name, values in self.components.items():
            applicable = [value for value in values if value is not None]
            summary[name] = sum(applicable) / len(applicable) if applicable else math.nan
        summary["total"] = sum(self.total) / len(self.total) if self.total else math.nan
        return summary


def reward_fields(samples: Sequence[Sample]) -> dict[str, list[Any]]:
    """Keyword fields for reward functions: ``answer`` and every ``extra`` key, one entry per sample.

    A key some samples lack (a batch mixing tasks) is ``None`` for those samples.
    """
    keys = dict.fromkeys(key for sample in samples for key in sample.extra)
    fields = {"answer": [sample.answer for sample in samples]}
    fields.update({key: [sample.extra.get(key) for sample in samples] for key in keys if key != "answer"})
    fields.setdefault("problem", [None] * len(samples))
    return fields


def run_reward(name: str, completions: Sequence[str], fields: Mapping[str, list[Any]], **options) -> list[float | None]:
    """Call reward ``name`` and check what it returns; a failure names the reward."""
    reward = REWARDS.get(name)
    try:
        values = list(reward(list(completions), **fields, **options))
    except Exception as error:
        raise RuntimeError(f"reward {name!r} raised {type(error).__name__}: {error}") from error
    if len(values) != len(completions):
        raise ValueError(f"reward {name!r} returned {len(values)} values for {len(completions)} completions")
    bad = [value for value in values if value is not None and not isinstance(value, (int, float))]
    if bad:
        raise TypeError(f"reward {name!r} returned non-numeric value(s) such as {bad[0]!r}")
    return [None if value is None else float(value) for value in values]


def score_completions(
    completions: Sequence[str],
    samples: Sequence[Sample],
    weights: Mapping[str, float],
    *,
    reward_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> RewardBreakdown:
    """Score ``completions[i]`` (a completion of ``samples[i]``) with every reward in ``weights``.

    ``reward_options`` maps a reward name to extra keyword arguments for it (e.g.
    ``{"count_accuracy": {"guards": {"max_chars": 2000}}}``). A reward with weight 0 is
    still computed and reported.
    """
    if len(completions) != len(samples):
        raise ValueError(f"{len(completions)} completions but {len(samples)} samples")
    reward_options = reward_options or {}
    unknown = set(reward_options) - set(weights)
    if unknown:
        raise ValueError(f"reward_options for reward(s) {sorted(unknown)} not in the weights {sorted(weights)}")
    fields = reward_fields(samples)
    components = {name: run_reward(name, completions, fields, **reward_options.get(name, {})) for name in weights}
    total = [
        sum(weights[name] * values[i] for name, values in components.items() if values[i] is not None)
        for i in range(len(completions))
    ]
    return RewardBreakdown(total=[float(value) for value in total], components=components)
