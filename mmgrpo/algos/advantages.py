"""Outcome advantages from per-completion rewards, normalised inside each prompt's group.

Rewards arrive flat, ``[N]``, group after group (N = prompts x G). Groups may differ in
size (dynamic group sizes), so every estimator works on a segment layout (``Groups``:
the group id of each element) with ``index_add`` sums instead of a ``.view(-1, G)``.

Estimators (registered in ``ADVANTAGE_ESTIMATORS``; each takes ``**kwargs`` so one call
site serves all):

- ``grpo``: ``(r - mean_g) / (std_g + eps)``, std unbiased (DeepSeekMath, arXiv
  2402.03300; TRL and verl use ``torch.std``). ``scale="batch"`` divides by the std of the
  whole batch instead (TRL ``scale_rewards="batch"``); ``scale_std=False`` only centres.
- ``dr_grpo``: ``r - mean_g`` (Dr. GRPO, arXiv 2503.20783: the std division biases
  learning towards too-easy and too-hard prompts).
- ``rloo``: ``r_i - mean_{j != i} r_j`` (Ahmadian et al., arXiv 2402.14740).
- ``reinforce_pp``: ``r - mean_g``, then whitened over the whole batch's tokens (REINFORCE++
  with group baseline, arXiv 2501.03262; verl's ``reinforce_plus_plus_baseline``): each completion
  weighs as many tokens as it has (``lengths``), ``(x - mean) / sqrt(var + 1e-8)``.

More estimators (Pass@k, OPO, GPG, GDPO) are in :mod:`mmgrpo.algos.advantage_variants`. A group whose
rewards are all equal (including a group of one) gets advantage exactly 0 (verl gives a lone completion
its reward: no group, no baseline, here no signal).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from mmgrpo.registry import Registry

AdvantageEstimator = Callable[..., Tensor]
ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")
StdScale = Literal["group", "batch"]
GroupSize = int | Sequence[int] | Tensor


@dataclass(frozen=True)
class Groups:
    """Segment layout of a flat batch: the group of each element, and each group's size."""

    ids: Tensor  # [N] int64, group index of each element
    sizes: Tensor  # [P] int64, number of elements in each group

    @classmethod
    def from_sizes(cls, group_size: GroupSize, n: int, device: torch.device) -> Groups:
        """Contiguous groups: one size for all (an ``int``), or one size per group in order."""
        sizes = torch.as_tensor(group_size, dtype=torch.long, device=device)
        if sizes.dim() == 0:
            size = int(sizes)
            if size < 1 or n % size:
                raise ValueError(f"group_size {size} does not divide the {n} rewards into whole groups")
            sizes = sizes.repeat(n // size)  # [P]
        if sizes.dim() != 1 or (sizes.numel() and int(sizes.min()) < 1):
            raise ValueError(f"group sizes must be a flat list of ints >= 1, got {sizes.tolist()}")
        if int(sizes.sum()) != n:
            raise ValueError(f"group sizes sum to {int(sizes.sum())} but there are {n} rewards")
        ids = torch.repeat_interleave(torch.arange(len(sizes), device=device), sizes)  # [N]
        return cls(ids=ids, sizes=sizes)

    @classmethod
    def whole(cls, n: int, device: torch.device) -> Groups:
        """The whole batch as one group."""
        return cls.from_sizes([n], n, device)

    def sum(self, x: Tensor) -> Tensor:
        """Per-group sums of ``x`` ``[N]`` -> ``[P]``."""
        return torch.zeros(len(self.sizes), dtype=x.dtype, device=x.device).index_add_(0, self.ids, x)

    def shift(self, x: Tensor) -> Tensor:
        """Each element's group maximum ``[N]``.

        Subtracted before summing so that an all-equal group sums to exactly 0 and its
        advantages come out exactly 0, whatever rounding a large reward would cause.
        """
        group_max = torch.full((len(self.sizes),), float("-inf"), dtype=x.dtype, device=x.device)
        return group_max.scatter_reduce(0, self.ids, x, "amax")[self.ids]

    def centred(self, x: Tensor) -> Tensor:
        """``x`` minus its group mean ``[N]``."""
        shifted = x - self.shift(x)  # [N]
        group_mean = self.sum(shifted) / self.sizes  # [P]
        return shifted - group_mean[self.ids]

    def std(self, x: Tensor) -> Tensor:
        """Each element's group standard deviation, unbiased ``[N]``; 0 for a group of one."""
        deviation = self.centred(x)  # [N]
        group_var = self.sum(deviation.square()) / (self.sizes - 1).clamp(min=1)  # [P]
        return group_var.sqrt()[self.ids]


def divide_by_std(centred: Tensor, std: Tensor, eps: float) -> Tensor:
    """``centred / (std + eps)``, and 0 where that is 0 / 0 (a zero-std group, ``eps=0``)."""
    denominator = std + eps
    return torch.where(denominator > 0, centred / denominator, torch.zeros_like(centred))


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(
    rewards: Tensor,
    groups: Groups,
    *,
    scale_std: bool = True,
    scale: StdScale = "group",
    eps: float = 1e-4,
    **_: Any,
) -> Tensor:
    """``(r - group mean) / (std + eps)``; std of the group or, ``scale="batch"``, of the batch."""
    centred = groups.centred(rewards)  # [N]
    if not scale_std:
        return centred
    if scale == "group":
        std = groups.std(rewards)
    else:
        std = Groups.whole(len(rewards), rewards.device).std(rewards)
    return divide_by_std(centred, std, eps)


@ADVANTAGE_ESTIMATORS.register("dr_grpo")
def dr_grpo_advantages(rewards: Tensor, groups: Groups, **_: Any) -> Tensor:
    """``r - group mean``: GRPO without the std division (Dr. GRPO)."""
    return groups.centred(rewards)


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo_advantages(rewards: Tensor, groups: Groups, **_: Any) -> Tensor:
    """``r_i - mean of the other rewards in the group`` = ``G / (G - 1) * (r_i - mean)``; 0 if G = 1."""
    sizes = groups.sizes[groups.ids].to(rewards.dtype)  # [N]
    return groups.centred(rewards) * sizes / (sizes - 1).clamp(min=1)


WHITEN_EPS = 1e-8
"""Added to the variance before the square root when whitening over the batch (verl's ``masked_whiten``)."""


def whiten_over_tokens(x: Tensor, lengths: Tensor | None) -> Tensor:
    """``[N]`` per-completion values standardised over the batch's tokens: mean and unbiased variance with each
    completion counted ``lengths[i]`` times (once each when ``lengths`` is None)."""
    weights = torch.ones_like(x) if lengths is None else lengths.to(x.dtype)
    total = weights.sum()
    mean = (weights * x).sum() / total
    variance = (weights * (x - mean).square()).sum() / (total - 1).clamp(min=1)
    return (x - mean) * torch.rsqrt(variance + WHITEN_EPS)


@ADVANTAGE_ESTIMATORS.register("reinforce_pp")
def reinforce_pp_advantages(rewards: Tensor, groups: Groups, *, lengths: Tensor | None = None, **_: Any) -> Tensor:
    """``r - group mean``, then whitened over the batch's tokens."""
    return whiten_over_tokens(groups.centred(rewards), lengths)


def group_advantages(
    rewards: Tensor,
    group_size: GroupSize,
    *,
    estimator: str = "grpo",
    scale_std: bool = True,
    scale: StdScale = "group",
    eps: float = 1e-4,
    lengths: Tensor | None = None,
    components: Tensor | None = None,
    component_weights: Tensor | None = None,
    baselines: Tensor | None = None,
    token_statistics: Any = None,
) -> Tensor:
    """Advantages of ``N`` completions from their rewards, normalised within each group.

    Args:
        rewards: ``[N]`` scalar rewards, laid out group after group.
        group_size: completions per prompt (an ``int``), or the size of each group in
            order (a list or 1-D tensor, for dynamic group sizes).
        estimator: a name in ``ADVANTAGE_ESTIMATORS``.
        scale_std: divide by the std (``grpo`` only; ``False`` = Dr. GRPO).
        scale: ``"group"`` or ``"batch"``: whose std divides (``grpo`` only).
        eps: added to the std (grpo, grpo_passk, gdpo) so a zero std cannot divide by 0 (TRL: 1e-4).
        lengths: ``[N]`` token count of each completion: the weights of a token-level mean (reinforce_pp and
            gdpo whiten over tokens, opo's baseline is length-weighted); None = one each.
        components: ``[N, K]`` the separate rewards each completion's total is made of (gdpo), with
            ``component_weights`` ``[N, K]`` their weights in the total (0 where a reward does not apply).
        baselines: ``[P]`` each group's greedy-completion reward (remax; NaN where there is none).
        token_statistics: the sampling policy's per-token statistics
            (:class:`~mmgrpo.algos.token_baseline.TokenStatistics`) a token-level estimator reads.

    Returns:
        ``[N]`` advantages (``[N, T]`` from a token-level estimator), float32 (or float64 for float64 rewards),
        detached.
    """
    if rewards.dim() != 1:
        raise ValueError(f"group_advantages: rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if eps < 0:
        raise ValueError(f"group_advantages: eps must be >= 0, got {eps}")
    if scale not in ("group", "batch"):
        raise ValueError(f"group_advantages: scale must be 'group' or 'batch', got {scale!r}")
    rewards = rewards.detach().to(torch.promote_types(rewards.dtype, torch.float32))
    bad = (~torch.isfinite(rewards)).nonzero().flatten()
    if len(bad):
        raise ValueError(f"group_advantages: non-finite rewards at positions {bad.tolist()}")
    groups = Groups.from_sizes(group_size, len(rewards), rewards.device)
    if lengths is not None and lengths.shape != rewards.shape:
        raise ValueError(f"group_advantages: lengths must be [N] = {len(rewards)}, got {tuple(lengths.shape)}")
    estimate = ADVANTAGE_ESTIMATORS.get(estimator)
    return estimate(rewards, groups, scale_std=scale_std, scale=scale, eps=eps, lengths=lengths,
                    components=components, component_weights=component_weights, baselines=baselines,
                    token_statistics=token_statistics)
