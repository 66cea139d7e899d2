"""A round of scored groups as plain data a checkpoint can hold (no prompt tensors, no media), and back.

An asynchronous run's checkpoint keeps the rounds sampled ahead and not yet trained on, so a resumed
run trains on those very completions (token ids, sampler log-probs, rewards, the policy version that
sampled them) instead of sampling them anew: it repeats the uninterrupted run exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from mmgrpo.models.batch import PromptBatch
from mmgrpo.skipped_rows import SkippedRow
from mmgrpo.trainer.rollouts import Group, Rollouts
from mmgrpo.types import Completion, InlineMedia, Sample
from tasks.reward_calls import RewardError


def rollouts_record(rollouts: Rollouts) -> dict[str, Any]:
    """``rollouts`` as nested lists, dicts and numbers; each group names its sample by id."""
    return {
        "groups": [_group_record(group) for group in rollouts.groups],
        "filtered": [_group_record(group) for group in rollouts.filtered],
        "rounds": rollouts.rounds,
        "skipped": [asdict(row) for row in rollouts.skipped],
        "zero_variance_groups": rollouts.zero_variance_groups,
        "sampled_groups": rollouts.sampled_groups,
        "reward_errors": [asdict(error) for error in rollouts.reward_errors],
    }


def rollouts_from_record(record: Mapping[str, Any], samples: Mapping[str, Sample], prompts: PromptBatch) -> Rollouts:
    """The round :func:`rollouts_record` wrote, its groups on ``samples`` (by id) and on the rows of
    ``prompts``, the round's request encoded again (as the sampler encoded it: the same rows, the same padding)."""
    return Rollouts(
        groups=[_group(data, samples, prompts) for data in record["groups"]],
        filtered=[_group(data, samples, prompts) for data in record["filtered"]],
        rounds=int(record["rounds"]),
        skipped=[SkippedRow(**row) for row in record["skipped"]],
        zero_variance_groups=int(record["zero_variance_groups"]),
        sampled_groups=int(record["sampled_groups"]),
        reward_errors=[RewardError(**error) for error in record["reward_errors"]],
    )


def _group_record(group: Group) -> dict[str, Any]:
    return {
        "sample_id": group.sample.id,
        "prompt_row": group.prompt_row,
        "completions": [asdict(completion) for completion in group.completions],
        "rewards": list(group.rewards),
        "components": {name: list(values) for name, values in group.components.items()},
        "metric": group.metric,
        "policy_version": group.policy_version,
        "steps": None if group.steps is None else [[list(span) for span in spans] for spans in group.steps],
        "greedy_reward": group.greedy_reward,
    }


def _group(data: Mapping[str, Any], samples: Mapping[str, Sample], prompts: PromptBatch) -> Group:
    steps = data["steps"]
    return Group(
        sample=samples[data["sample_id"]],
        prompts=prompts,
        prompt_row=int(data["prompt_row"]),
        completions=[_completion(completion) for completion in data["completions"]],
        rewards=list(data["rewards"]),
        components={name: list(values) for name, values in data["components"].items()},
        metric=data["metric"],
        policy_version=data["policy_version"],
        steps=None if steps is None else [[(int(a), int(b), float(score)) for a, b, score in spans] for spans in steps],
        greedy_reward=data.get("greedy_reward"),  # absent from checkpoints older than ReMax
    )


def _completion(data: Mapping[str, Any]) -> Completion:
    media = data.get("media")  # absent from checkpoints older than image observations
    return Completion(**{**data, "media": None if media is None else InlineMedia(**media)})
