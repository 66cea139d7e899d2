"""How far the sampler's log-probs are from the trainer's, token by token.

An engine with its own copy of the weights and its own kernels (vLLM) reports log-probs of
the tokens it sampled that differ slightly from what the trainer computes for the same
weights; large gaps mean the weights did not arrive, or the two disagree on the input
(positions, media), and the policy-gradient ratio is then off-policy.
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
