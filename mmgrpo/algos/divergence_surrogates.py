"""Policy losses that bound the update by a divergence of the token's probability, not a clip of its ratio.

Registered in :data:`~mmgrpo.algos.surrogates.SURROGATES` (same contract: per-token losses ``[B, T]``, the ratio,
the clip statistics):

- ``dppo_tv``: DPPO-Binary-TV (arXiv 2602.04879). A token keeps the truncated importance-weighted policy gradient,
  ``-A * sg[min(r, ratio_cap)] * log pi``, while the update has not moved its probability past the trust region
  in the advantage's direction: ``pi - pi_old <= eps_high`` for ``A > 0``, ``pi - pi_old >= -eps_low`` otherwise;
  past it the token's gradient is 0. ``eps_low``/``eps_high`` are these probability thresholds here, not ratio
  clips. ``ratio_cap`` (verl's ``clip_ratio_c``, 20) truncates the weight in place of PPO's dual clip.
- ``dppo_kl``: DPPO-Binary-KL, the same with the binary KL ``pi_old log(pi_old / pi) + (1 - pi_old)
  log((1 - pi_old) / (1 - pi))`` as the divergence: a token leaves the region when that exceeds the threshold
  and its probability moved in the advantage's direction.
- ``dro``: DRO (Richemond et al., arXiv 2405.19107; Kimi k1.5, arXiv 2501.12599), the policy gradient with a
  quadratic penalty on the token log-ratio, ``-(A log pi - beta / 2 (log pi - log pi_old)^2)``: no clip at all.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmgrpo.algos.stats import masked_mean
from mmgrpo.algos.surrogates import SURROGATES, clip_fractions

DPPO_LOG_RATIO_BOUND = 20.0
"""The log-ratio DPPO exponentiates is clamped to +-20 (verl's bound: a far off-policy token must not overflow)."""
BINARY_KL_EPS = 1e-8
"""Keeps ``log((1 - pi_old) / (1 - pi))`` finite when a probability is 1 (verl's constant)."""


def _no_dual_clip(name: str, dual_clip: float | None) -> None:
    if dual_clip is not None:
        raise ValueError(f"policy_loss: dual_clip bounds PPO's clipped loss; {name} has no ratio clip to bound")


def _truncated_policy_gradient(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, stays: Tensor,
                               ratio_cap: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """DPPO's loss given which tokens ``stays`` inside the trust region (per the advantage's sign)."""
    if ratio_cap <= 0:
        raise ValueError(f"policy_loss: dppo needs dppo_ratio_cap > 0, got {ratio_cap}")
    ratio = torch.exp((logp - old_logp).clamp(-DPPO_LOG_RATIO_BOUND, DPPO_LOG_RATIO_BOUND))
    weight = ratio.detach().clamp(max=ratio_cap)
    kept = stays.detach().to(logp.dtype)
    losses = -advantages * weight * logp * kept
    left = ~stays
    low = masked_mean((left & (advantages <= 0)).to(logp.dtype), mask)
    high = masked_mean((left & (advantages > 0)).to(logp.dtype), mask)
    return losses, ratio, clip_fractions(low, high)


@SURROGATES.register("dppo_tv")
def dppo_tv(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
            dual_clip: float | None = None, dppo_ratio_cap: float = 20.0,
            **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """DPPO-Binary-TV: the truncated policy gradient of the tokens whose probability moved less than the
    thresholds (total variation) in the advantage's direction."""
    _no_dual_clip("dppo_tv", dual_clip)
    moved = torch.exp(logp) - torch.exp(old_logp)  # [B, T]
    stays = torch.where(advantages > 0, moved <= eps_high, moved >= -eps_low)
    return _truncated_policy_gradient(logp, old_logp, advantages, mask, stays, dppo_ratio_cap)


@SURROGATES.register("dppo_kl")
def dppo_kl(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
            dual_clip: float | None = None, dppo_ratio_cap: float = 20.0,
            **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """DPPO-Binary-KL: as ``dppo_tv`` with the binary KL of the token's old and new probability."""
    _no_dual_clip("dppo_kl", dual_clip)
    prob, old_prob = torch.exp(logp), torch.exp(old_logp)
    binary_kl = old_prob * (old_logp - logp) + (1 - old_prob) * torch.log(
        (1 - old_prob + BINARY_KL_EPS) / (1 - prob + BINARY_KL_EPS))
    stays = torch.where(advantages > 0, (binary_kl <= eps_high) | (prob <= old_prob),
                        (binary_kl <= eps_low) | (prob >= old_prob))
    return _truncated_policy_gradient(logp, old_logp, advantages, mask, stays, dppo_ratio_cap)


@SURROGATES.register("dro")
def dro(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
        dual_clip: float | None = None, dro_beta: float = 0.05,
        **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """DRO: the policy gradient minus a quadratic penalty on the token log-ratio (``eps_*`` unused)."""
    _no_dual_clip("dro", dual_clip)
    if dro_beta <= 0:
        raise ValueError(f"policy_loss: dro needs dro_beta > 0, got {dro_beta}")
    log_ratio = logp - old_logp
    losses = -(advantages * logp - 0.5 * dro_beta * log_ratio.square())
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    return losses, torch.exp(log_ratio).detach(), clip_fractions(zero, zero)
