"""Metrics of a step's rollouts: rewards by component, accuracy, lengths, group statistics."""

from __future__ import annotations

import statistics

from mmgrpo.trainer.rollouts import Rollouts


def rollout_metrics(rollouts: Rollouts) -> dict[str, float]:
    """Means and spreads over the groups the step trains on (plus filtering counts)."""
    groups = rollouts.groups
    completions = rollouts.completions
    totals = [r for group in groups for r in group.rewards]
    lengths = [len(c.token_ids) for c in completions]
    sizes = rollouts.group_sizes
    metrics: dict[str, float] = {
        "reward/total": _mean(totals),
        "reward/total_std": statistics.pstdev(totals) if totals else 0.0,
        "length/mean": _mean(lengths),
        "length/max": float(max(lengths, default=0)),
        "length/total": float(sum(lengths)),
        "truncation_rate": _mean([float(c.truncated) for c in completions]),
        "groups": float(len(groups)),
        "group_size/mean": _mean(sizes),
        "group_size/min": float(min(sizes, default=0)),
        "group_size/max": float(max(sizes, default=0)),
        "zero_variance_frac": rollouts.zero_variance_groups / max(1, rollouts.sampled_groups),
        "rollout_rounds": float(rollouts.rounds),
        "dropped_prompts": float(rollouts.dropped_prompts),
    }
    names = {name for group in groups for name in group.components}
    for name in sorted(names):
        values = [v for group in groups for v in group.components.get(name, []) if v is not None]
        metrics[f"reward/{name}"] = _mean(values)
        metrics[f"reward/{name}_std"] = statistics.pstdev(values) if values else 0.0
    metrics["accuracy"] = _mean([float(ok) for group in groups for ok in group.successes()])
    return metrics


def _mean(values: list[float] | list[int]) -> float:
    return float(sum(values) / len(values)) if values else 0.0
