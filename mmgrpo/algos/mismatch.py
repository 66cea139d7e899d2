"""How far the sampler's log-probs are from the trainer's, token by token.

An engine with its own copy of the weights and its own kernels (vLLM) reports log-probs of
the tokens it sampled that differ slightly from what the trainer computes for the same
weights; large gaps mean the weights did not arrive, or the two disagree on the input
(positions, media), and the policy-gradient ratio is then off-policy.

Truncated importance sampling (TIS; Yao et al. 2025, "Your Efficient RL Framework Secretly
Brings You Off-Policy RL Training") corrects for it: each token's policy-gradient loss is
weighted by ``min(pi_trainer(a) / pi_sampler(a), C)``, the ratio of the trainer's old
log-prob to the sampler's, capped at C so a rare token cannot dominate the step.
"""

from __future__ import annotations

import torch
from torch import Tensor


def logprob_gap(sampler_logp: Tensor, trainer_logp: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Mean and max of ``|trainer_logp - sampler_logp|`` over the ``[B, T]`` tokens where ``mask`` is
    set (0-dim float tensors; both 0 when no token is masked in)."""
    mask = mask.bool()
    gap = torch.where(mask, (trainer_logp.detach().float() - sampler_logp.detach().float()).abs(), 0.0)
    count = mask.sum()
    return {
        "mean": gap.sum() / count.clamp(min=1),
        "max": gap.max() if gap.numel() else gap.new_zeros(()),
    }


def truncated_is_weights(
    trainer_logp: Tensor, sampler_logp: Tensor, mask: Tensor, cap: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """TIS weights ``[B, T]`` = ``min(exp(trainer_logp - sampler_logp), cap)`` on masked-in tokens
    (1 elsewhere, detached), and their stats over masked-in tokens: ``tis_ratio_mean`` and
    ``tis_ratio_max`` (before the cap) and ``tis_clipped_frac`` (tokens the cap lowered)."""
    if cap <= 0:
        raise ValueError(f"truncated_is_weights: cap must be > 0, got {cap}")
    mask = mask.bool()
    log_ratio = torch.where(mask, trainer_logp.detach().float() - sampler_logp.detach().float(), 0.0)
    ratio = log_ratio.exp()
    count = mask.sum().clamp(min=1)
    stats = {
        "tis_ratio_mean": torch.where(mask, ratio, 0.0).sum() / count,
        "tis_ratio_max": torch.where(mask, ratio, 0.0).amax() if ratio.numel() else ratio.new_zeros(()),
        "tis_clipped_frac": (mask & (ratio > cap)).sum() / count,
    }
    return torch.where(mask, ratio.clamp(max=cap), 1.0), stats
