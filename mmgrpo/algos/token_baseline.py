"""The optimal token baseline: a baseline per token position, fitted to the group's returns weighted by how much
each path has varied so far (verl's ``optimal_token_baseline``).

For the completions ``i`` of one group, with outcome return ``G_i`` (the reward, at every token of the completion),
the sampling policy's probability ``pi_{i,t}`` of token t and ``S_{i,t} = sum_v pi_{i,t}(v)^2`` over the vocabulary::

    w_{i,t} = 1 - 2 pi_{i,t} + S_{i,t}          (the squared norm of the token's score function, in logit space)
    W_{i,t} = sum_{j <= t} w_{i,j}              (the path's variance so far)
    B_t     = sum_i G_i W_{i,t} / (sum_i W_{i,t} + eps)   over the completions still running at t
    A_{i,t} = G_i - B_t

the variance-minimising baseline of the policy gradient at each step. With ``zero_tail``, the part of a group's
single longest completion past its runner-up's length has no other completion to fit a baseline to: B is 0
there (verl's ``handle_zero_tail``). A group of one gets advantage 0 (verl gives it its reward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from mmgrpo.algos.advantages import ADVANTAGE_ESTIMATORS, Groups

TOKEN_BASELINE_EPS = 1e-8
"""Added to the per-step sum of path variances before dividing (verl's constant)."""


def optimal_token_baseline(rewards: Tensor, groups: Groups, logp: Tensor, sum_pi_squared: Tensor, mask: Tensor,
                           *, zero_tail: bool = True, importance_weights: Tensor | None = None) -> Tensor:
    """``[N, T]`` advantages of ``N`` completions from their rewards ``[N]`` and, per token ``[N, T]``, the sampling
    policy's log-prob, ``sum_v pi(v)^2`` and the completion mask (a prefix of each row). ``importance_weights``
    ``[N, T]`` (the truncated trainer/sampler ratios of ``algo.is_correction``) scale each token's variance by their
    square, the baseline that minimises the error under that correction (as verl does with its rollout weights)."""
    if not logp.shape == sum_pi_squared.shape == mask.shape or logp.shape[0] != len(rewards):
        raise ValueError(f"optimal_token_baseline: logp {tuple(logp.shape)}, sum_pi_squared "
                         f"{tuple(sum_pi_squared.shape)} and mask {tuple(mask.shape)} must all be [N, T], "
                         f"N = {len(rewards)}")
    dtype = torch.promote_types(rewards.dtype, torch.float32)
    mask = mask.to(dtype)
    returns = rewards.to(dtype)[:, None] * mask  # [N, T]
    variance = 1 - 2 * logp.to(dtype).exp() + sum_pi_squared.to(dtype)  # [N, T]
    if importance_weights is not None:
        variance = variance * importance_weights.to(dtype).square()
    path_variance = (variance * mask).cumsum(dim=-1) * mask
    per_group = torch.zeros((len(groups.sizes), mask.shape[1]), dtype=dtype, device=mask.device)
    numerator = per_group.index_add(0, groups.ids, returns * path_variance)  # [P, T]
    denominator = per_group.index_add(0, groups.ids, path_variance) + TOKEN_BASELINE_EPS
    baseline = (numerator / denominator)[groups.ids]  # [N, T]
    if zero_tail:
        baseline = baseline * ~_beyond_runner_up(mask.sum(dim=-1).long(), groups, mask.shape[1])
    alone = (groups.sizes[groups.ids] == 1)[:, None]
    return torch.where(alone, torch.zeros_like(returns), (returns - baseline) * mask)


def _beyond_runner_up(lengths: Tensor, groups: Groups, width: int) -> Tensor:
    """``[N, T]``: the positions of each group's single longest completion past its second-longest one's length."""
    longest = torch.zeros(len(groups.sizes), dtype=lengths.dtype, device=lengths.device).scatter_reduce(
        0, groups.ids, lengths, "amax", include_self=False)  # [P]
    is_longest = lengths == longest[groups.ids]  # [N]
    how_many = torch.zeros_like(longest).index_add(0, groups.ids, is_longest.long())  # [P]
    others = torch.where(is_longest, torch.zeros_like(lengths), lengths)
    runner_up = torch.zeros_like(longest).scatter_reduce(0, groups.ids, others, "amax", include_self=True)  # [P]
    single = is_longest & (how_many[groups.ids] == 1) & (groups.sizes[groups.ids] > 1)  # [N]
    positions = torch.arange(width, device=lengths.device)[None, :]
    return single[:, None] & (positions >= runner_up[groups.ids][:, None])


@dataclass(frozen=True)
class TokenStatistics:
    """What a token-level estimator reads of the sampling policy, each ``[N, T]``: the sampled tokens' log-probs,
    ``sum_v pi(v)^2`` at each position and the completion mask."""

    logp: Tensor
    sum_pi_squared: Tensor
    mask: Tensor
    importance_weights: Tensor | None = None  # [N, T] algo.is_correction's weights, None without one


TOKEN_LEVEL_ESTIMATORS = frozenset({"optimal_token_baseline"})
"""Estimators that need :class:`TokenStatistics` (one forward of the policy before the update) and give
advantages per token ``[N, T]``."""


@ADVANTAGE_ESTIMATORS.register("optimal_token_baseline")
def optimal_token_baseline_advantages(rewards: Tensor, groups: Groups, *,
                                      token_statistics: TokenStatistics | None = None, **_: Any) -> Tensor:
    """:func:`optimal_token_baseline` as a registered estimator (``[N, T]``)."""
    if token_statistics is None:
        raise ValueError("advantage_estimator optimal_token_baseline needs the sampling policy's per-token log-probs "
                         "and sum of squared probabilities (token_statistics): the trainer computes them in one "
                         "forward before the update")
    stats = token_statistics
    return optimal_token_baseline(rewards, groups, stats.logp, stats.sum_pi_squared, stats.mask,
                                  importance_weights=stats.importance_weights)
