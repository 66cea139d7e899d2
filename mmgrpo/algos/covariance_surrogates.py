"""Policy losses that hold the entropy up by restraining the tokens whose log-prob co-varies most with the advantage.

Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models" (arXiv 2505.22617,
the Clip-Cov and KL-Cov methods of its section on controlling entropy by covariance): the policy's entropy falls as ``Cov(log pi(y_t), A_t)`` is large, so a few high-covariance tokens are
kept from being pushed further. Registered in :data:`~mmgrpo.algos.surrogates.SURROGATES`; the covariance of a
token is ``(A_t - mean A) * (log pi_t - mean log pi)``, means over the micro-batch's completion tokens.

- ``clip_cov``: PPO's clipped loss, except that ``max(clip_cov_ratio * tokens, 1)`` tokens drawn at random
  (``torch.randperm`` on the global CPU generator, as verl draws them) among those PPO did not clip whose covariance
  is in ``(clip_cov_lb, clip_cov_ub)`` lose their gradient. Paper: ratio 2e-4, bounds 1 and 5.
- ``kl_cov``: the unclipped ``-A * r`` per token, plus ``kl_cov_coef * |log r|`` on the
  ``max(kl_cov_ratio * tokens, 1)`` tokens of largest covariance. Paper: ratio 2e-4 (2e-3 for a 7B model), coef 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmgrpo.algos.stats import masked_mean
from mmgrpo.algos.surrogates import SURROGATES, clip_fractions, clip_stats, clipped_surrogate


def token_covariance(logp: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """``[B, T]``: each token's centred advantage times its centred log-prob (detached), means over ``mask``."""
    logp = logp.detach()
    return (advantages - masked_mean(advantages, mask)) * (logp - masked_mean(logp, mask))


def _selected_count(ratio: float, mask: Tensor, name: str) -> int:
    if ratio <= 0:
        raise ValueError(f"policy_loss: {name} needs a ratio > 0 of tokens to select, got {ratio}")
    return max(int(ratio * int(mask.sum())), 1)


@SURROGATES.register("clip_cov")
def clip_cov(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
             dual_clip: float | None = None, clip_cov_ratio: float = 2e-4, clip_cov_lb: float = 1.0,
             clip_cov_ub: float = 5.0, **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Clip-Cov: PPO's clip, and a random few of the unclipped tokens with covariance in the bounds detached."""
    if dual_clip is not None:
        raise ValueError("policy_loss: dual_clip is not part of clip_cov (its extra clip is by covariance)")
    count = _selected_count(clip_cov_ratio, mask, "clip_cov")
    ratio = torch.exp(logp - old_logp)
    unclipped = -advantages * ratio
    losses = clipped_surrogate(ratio, advantages, eps_low, eps_high, None)
    covariance = token_covariance(logp, advantages, mask)
    candidates = mask & (losses <= unclipped) & (covariance > clip_cov_lb) & (covariance < clip_cov_ub)
    positions = candidates.nonzero()  # [K, 2], row-major
    chosen = positions[torch.randperm(len(positions))[:count].to(positions.device)]
    detached = torch.zeros_like(mask)
    detached[chosen[:, 0], chosen[:, 1]] = True
    stats = clip_stats(ratio, advantages, mask, eps_low, eps_high, None)
    low = stats["clip_frac_low"] + masked_mean((detached & (advantages < 0)).to(logp.dtype), mask)
    high = stats["clip_frac_high"] + masked_mean((detached & (advantages >= 0)).to(logp.dtype), mask)
    return torch.where(detached, torch.zeros_like(losses), losses), ratio, clip_fractions(low, high)


@SURROGATES.register("kl_cov")
def kl_cov(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
           dual_clip: float | None = None, kl_cov_ratio: float = 2e-4, kl_cov_coef: float = 1.0,
           **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """KL-Cov: the unclipped ratio loss, and an absolute log-ratio penalty on the top-covariance tokens
    (``eps_*`` unused: nothing is clipped)."""
    if dual_clip is not None:
        raise ValueError("policy_loss: dual_clip bounds PPO's clipped loss; kl_cov has no clip")
    count = _selected_count(kl_cov_ratio, mask, "kl_cov")
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    losses = -advantages * ratio
    positions = mask.flatten().nonzero().squeeze(-1)  # [K] flat indices of completion tokens
    if len(positions):
        covariance = token_covariance(logp, advantages, mask).flatten()[positions]
        top = positions[covariance.topk(min(count, len(positions))).indices]
        penalised = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
        penalised[top] = True
        losses = losses + kl_cov_coef * log_ratio.abs() * penalised.view_as(mask)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    return losses, ratio, clip_fractions(zero, zero)
