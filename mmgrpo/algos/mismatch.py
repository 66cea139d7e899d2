"""How far the sampler's log-probs are from the trainer's, token by token.

An engine with its own copy of the weights and its own kernels (vLLM) reports log-probs of
the tokens it sampled that differ slightly from what the trainer computes for the same
weights; large gaps mean the weights did not arrive, or the two disagree on the input
(positions, media), and the policy-gradient ratio is then off-policy.

Importance sampling corrects for it (and for a sampler that lags the policy, as in asynchronous
rollout): each token's policy-gradient loss is weighted by the ratio of the trainer's old
probability of it to the sampler's. Truncated IS (TIS; Yao et al. 2025, "Your Efficient RL
Framework Secretly Brings You Off-Policy RL Training") caps that weight at C so a rare token
cannot dominate the step; masked IS (MIS; Liu et al. 2025, "When Speed Kills Stability")
drops the tokens whose ratio exceeds C instead. Either per token or per sequence (the product
of its token ratios).
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class ISCorrection:
    """Importance-sampling correction against the sampler: ``mode`` "tis" truncates each weight at
    ``cap``, "mis" drops the tokens (or sequences) whose ratio exceeds it; ``level`` "token" takes one
    ratio per token, "sequence" the product of a completion's token ratios for all its tokens."""

    mode: str = "tis"
    level: str = "token"
    cap: float = 2.0

    def __post_init__(self) -> None:
        if self.mode not in ("tis", "mis") or self.level not in ("token", "sequence") or not self.cap > 0:
            raise ValueError(f"ISCorrection needs mode tis|mis, level token|sequence and cap > 0, got {self}")


def importance_weights(
    trainer_logp: Tensor, sampler_logp: Tensor, mask: Tensor, correction: ISCorrection
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """``(weights, keep, stats)`` for ``[B, T]`` tokens: the ratio ``pi_trainer / pi_sampler`` of each
    masked-in token (or of its sequence), truncated at the cap (TIS) or kept only where it does not
    exceed it (MIS: ``keep`` is False there, the token leaves the loss and its normaliser); weights are 1
    on masked-out tokens and detached. ``stats``: ``ratio_mean`` and ``ratio_max`` over masked-in tokens
    (before the cap) and ``capped_frac``, the share of them the cap truncated or dropped."""
    mask = mask.bool()
    log_ratio = torch.where(mask, trainer_logp.detach().float() - sampler_logp.detach().float(), 0.0)
    if correction.level == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(log_ratio)
    ratio = torch.where(mask, log_ratio.exp(), 1.0)
    capped = mask & (ratio > correction.cap)
    if correction.mode == "tis":
        weights, keep = ratio.clamp(max=correction.cap), mask
    else:
        weights, keep = torch.where(capped, 0.0, ratio), mask & ~capped
    count = mask.sum().clamp(min=1)
    stats = {
        "ratio_mean": torch.where(mask, ratio, 0.0).sum() / count,
        "ratio_max": torch.where(mask, ratio, 0.0).amax() if ratio.numel() else ratio.new_zeros(()),
        "capped_frac": capped.sum() / count,
    }
    return torch.where(mask, weights, 1.0), keep, stats
