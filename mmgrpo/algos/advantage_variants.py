"""Outcome-advantage estimators beyond the group mean and std, registered in ``ADVANTAGE_ESTIMATORS`` beside
``grpo``, ``dr_grpo``, ``rloo`` and ``reinforce_pp`` (same segment layout, same ``**kwargs`` call):

- ``grpo_passk``: Pass@k training (arXiv 2503.19595): only the best completion of a group gets an advantage,
  ``r_max - r_second``, divided by the group's std (+ eps) unless ``scale_std`` is off; every other completion
  gets 0. A group of one has no runner-up: 0 (verl refuses it).
- ``opo``: On-Policy RL with Optimal reward baseline (arXiv 2505.23585): ``r - sum_j |o_j| r_j / sum_j |o_j|``,
  the group's length-weighted mean reward as the baseline (``lengths`` required).
- ``gpg``: GPG (arXiv 2504.02546): ``alpha (r - mean_g)`` with ``alpha = N / #(r != 0)``, the batch's size over its
  count of non-zero rewards, which scales the gradient back up when few completions are rewarded (its ``F_norm``
  is 1, as verl sets it).
- ``remax``: ReMax (arXiv 2310.10505): ``r - b``, ``b`` the reward of the prompt's greedy completion
  (``baselines``, one per group, sampled beside the group and never trained on); a group without one (the
  engine gave none) falls back to its mean reward.
- ``gdpo``: GDPO (arXiv 2601.05242): each reward that makes up the total is GRPO-normalised in its group on its
  own, the results summed with the rewards' weights, then whitened over the batch's tokens: a reward of large
  range no longer drowns out the others (``components`` and ``component_weights`` required).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mmgrpo.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    Groups,
    StdScale,
    divide_by_std,
    grpo_advantages,
    whiten_over_tokens,
)


@ADVANTAGE_ESTIMATORS.register("grpo_passk")
def grpo_passk_advantages(rewards: Tensor, groups: Groups, *, scale_std: bool = True, eps: float = 1e-4,
                          **_: Any) -> Tensor:
    """The best completion of each group: its margin over the runner-up (over the group std); the rest: 0."""
    n = len(rewards)
    best = groups.shift(rewards)  # [N] each element's group maximum
    positions = torch.arange(n, device=rewards.device)
    first_best = torch.full((len(groups.sizes),), n, device=rewards.device).scatter_reduce(
        0, groups.ids, torch.where(rewards == best, positions, n), "amin")  # [P]
    winner = positions == first_best[groups.ids]  # [N] one per group
    runner_up = groups.shift(torch.where(winner, -torch.inf, rewards))
    margin = torch.where(groups.sizes[groups.ids] > 1, best - runner_up, 0.0)
    if scale_std:
        margin = divide_by_std(margin, groups.std(rewards), eps)
    return torch.where(winner, margin, torch.zeros_like(margin))


@ADVANTAGE_ESTIMATORS.register("opo")
def opo_advantages(rewards: Tensor, groups: Groups, *, lengths: Tensor | None = None, **_: Any) -> Tensor:
    """``r`` minus the group's length-weighted mean reward (the plain mean for a group without tokens)."""
    if lengths is None:
        raise ValueError("advantage_estimator opo weighs its baseline by completion length: pass lengths")
    weights = lengths.to(rewards.dtype)
    shifted = rewards - groups.shift(rewards)  # an all-equal group: exactly 0
    group_tokens = groups.sum(weights)  # [P]
    weighted_mean = groups.sum(weights * shifted) / group_tokens.clamp(min=1)
    plain_mean = groups.sum(shifted) / groups.sizes
    baseline = torch.where(group_tokens > 0, weighted_mean, plain_mean)  # [P]
    return shifted - baseline[groups.ids]


@ADVANTAGE_ESTIMATORS.register("gpg")
def gpg_advantages(rewards: Tensor, groups: Groups, **_: Any) -> Tensor:
    """``N / #(r != 0)`` times the group-centred reward."""
    alpha = len(rewards) / torch.count_nonzero(rewards).clamp(min=1)
    return alpha * groups.centred(rewards)


@ADVANTAGE_ESTIMATORS.register("remax")
def remax_advantages(rewards: Tensor, groups: Groups, *, baselines: Tensor | None = None, **_: Any) -> Tensor:
    """``r`` minus its group's greedy-completion reward (NaN: none, the group mean instead)."""
    if baselines is None or baselines.shape != groups.sizes.shape:
        got = None if baselines is None else tuple(baselines.shape)
        raise ValueError(f"advantage_estimator remax needs one greedy-completion reward per group "
                         f"({len(groups.sizes)}), got {got}")
    baseline = baselines.to(rewards.dtype)[groups.ids]  # [N]
    return torch.where(torch.isnan(baseline), groups.centred(rewards), rewards - baseline)


@ADVANTAGE_ESTIMATORS.register("gdpo")
def gdpo_advantages(rewards: Tensor, groups: Groups, *, components: Tensor | None = None,
                    component_weights: Tensor | None = None, lengths: Tensor | None = None, scale_std: bool = True,
                    scale: StdScale = "group", eps: float = 1e-4, **_: Any) -> Tensor:
    """Each reward GRPO-normalised in its group, weighted and summed, then whitened over the batch's tokens."""
    if components is None or component_weights is None:
        raise ValueError("advantage_estimator gdpo normalises each reward on its own: pass components [N, K] and "
                         "component_weights [N, K]")
    expected = (len(rewards), components.shape[-1] if components.dim() == 2 else -1)
    if components.shape != expected or component_weights.shape != expected:
        raise ValueError(f"gdpo: components and component_weights must be [N, K] with N = {len(rewards)}, got "
                         f"{tuple(components.shape)} and {tuple(component_weights.shape)}")
    components = components.to(rewards.dtype)
    total = torch.zeros_like(rewards)
    for k in range(components.shape[1]):
        normalised = grpo_advantages(components[:, k], groups, scale_std=scale_std, scale=scale, eps=eps)
        total = total + component_weights[:, k].to(rewards.dtype) * normalised
    return whiten_over_tokens(total, lengths)
