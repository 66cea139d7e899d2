"""Metrics of a step's rollouts: rewards by component, reward failures, accuracy, lengths, group statistics."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Sequence

import torch

from mmgrpo.rollout.tool_metrics import ToolUse, tool_metrics
from mmgrpo.trainer.metrics import completion_prompt
from mmgrpo.trainer.rollouts import Group, Rollouts
from mmgrpo.trainer.turn_records import turn_records


def rollout_metrics(rollouts: Rollouts) -> dict[str, float]:
    """Means and spreads over the groups the step trains on (plus filtering counts).

    ``reward/<name>`` is the mean over the completions the reward applied to; a reward
    that applied to none this step (all ``None``, e.g. all failed) has no value, not 0.
    ``reward/<name>/errors`` counts its failed completions in every group scored this step.
    """
    groups = rollouts.groups
    completions = rollouts.completions
    totals = [r for group in groups for r in group.rewards]
    lengths = [c.policy_token_count for c in completions]
    sizes = rollouts.group_sizes
    metrics: dict[str, float] = {
        "reward/total": _mean(totals),
        "reward/total_std": _std(totals),
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
    errors = Counter(error.reward for error in rollouts.reward_errors)
    names = {name for group in [*groups, *rollouts.filtered] for name in group.components} | set(errors)
    for name in sorted(names):
        values = [v for group in groups for v in group.components.get(name, []) if v is not None]
        if values:
            metrics[f"reward/{name}"] = _mean(values)
            metrics[f"reward/{name}_std"] = _std(values)
        metrics[f"reward/{name}/errors"] = float(errors[name])
    metrics["accuracy"] = _mean([float(ok) for group in groups for ok in group.successes()])
    greedy = [group.greedy_reward for group in groups if group.greedy_reward is not None]
    if greedy:  # ReMax's baselines: the greedy completions' reward, and how many groups had one
        metrics["reward/greedy"] = _mean(greedy)
        metrics["reward/greedy_frac"] = len(greedy) / len(groups)
    metrics |= tool_metrics([ToolUse.of(completion) for completion in completions])
    steps = rollouts.step_rewards()
    if steps is not None:  # process rewards: steps found and their (weighted) scores
        scores = [score for spans in steps for _, _, score in spans]
        metrics["process/steps_mean"] = _mean([len(spans) for spans in steps])
        metrics["process/step_score_mean"] = _mean(scores)
        metrics["process/positive_step_frac"] = _mean([float(score > 0) for score in scores])
    return metrics


def staleness_metrics(groups: Sequence[Group], version: int, max_staleness: int) -> dict[str, float]:
    """How many policy versions the trained groups lag ``version`` (the policy being updated): mean,
    max, and the histogram as the fraction of groups at each lag 0..``max_staleness``."""
    lags = [version - group.policy_version for group in groups if group.policy_version is not None]
    metrics = {"async/staleness_mean": _mean(lags), "async/staleness_max": float(max(lags, default=0))}
    for lag in range(max_staleness + 1):
        metrics[f"async/staleness_{lag}_frac"] = _mean([float(value == lag) for value in lags])
    return metrics


def advantage_metrics(advantages: torch.Tensor) -> dict[str, float]:
    """Mean, spread and largest magnitude of the step's advantages (all zero: no group taught anything)."""
    return {
        "advantage/mean": float(advantages.mean()),
        "advantage/std": float(advantages.std()) if advantages.numel() > 1 else 0.0,
        "advantage/abs_max": float(advantages.abs().max()),
    }


def step_timing(started: float, rollout_done: float, reference_done: float, finished: float) -> dict[str, float]:
    """Seconds of the step's phases from their end times (``time.perf_counter``)."""
    return {
        "time/rollout": rollout_done - started,
        "time/reference": reference_done - rollout_done,
        "time/update": finished - reference_done,
        "time/step": finished - started,
    }

def completion_records(rollouts: Rollouts, advantages: torch.Tensor, step: int,
                       tokenizer: Any = None) -> list[dict[str, Any]]:
    """One ``completions.jsonl`` row per completion, whole groups in order: what a report shows of it (the
    prompt's text and media references, the answer, each reward component, the advantage; with ``tokenizer``, a
    multi-turn completion's ``turns``, :func:`~mmgrpo.trainer.turn_records.turn_records`)."""
    records, position, values = [], 0, advantages.tolist()
    for group in rollouts.groups:
        prompt, successes = completion_prompt(group.sample), group.successes()
        for index, (completion, reward) in enumerate(zip(group.completions, group.rewards)):
            records.append({
                "step": step, "sample_id": group.sample.id, "task": group.sample.task,
                "answer": group.sample.answer, **prompt, "completion": completion.text, "reward": reward,
                "rewards": {name: scores[index] for name, scores in group.components.items()},
                "advantage": values[position], "correct": successes[index], "truncated": completion.truncated,
                **({"turns": turn_records(completion, tokenizer)}
                   if tokenizer is not None and completion.observation_spans else {}),
            })
            position += 1
    return records


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def _std(values: Sequence[float]) -> float:
    """Population standard deviation (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(math.fsum((value - mean) ** 2 for value in values) / len(values))
