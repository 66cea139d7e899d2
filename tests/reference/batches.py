"""The random batches both reference files compare on (no verl or TRL import here)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

F64 = torch.float64
TOLERANCE = {"atol": 1e-6, "rtol": 1e-6}
WIDTH = 12  # T: the tensors' width
MAX_LEN = 16  # seq-mean-token-sum-norm's budget (verl loss_scale_factor, TRL max_completion_length), not T
LENGTHS = (12, 1, 7, 0, 3, 12, 5, 2, 9, 1)  # completion tokens per row: 0 is a fully masked row
FULL_ROWS = tuple(n for n in LENGTHS if n > 0)
SEEDS = (0, 1)


@dataclass(frozen=True)
class Batch:
    """One random batch: log-probs ``[B, T]``, one advantage per completion ``[B]``, a 0/1 mask ``[B, T]``."""

    logp: Tensor
    old_logp: Tensor
    advantages: Tensor
    mask: Tensor

    @property
    def token_advantages(self) -> Tensor:
        """verl's ``[B, T]`` advantages: the completion's on its tokens, 0 elsewhere (as its estimators return)."""
        return self.advantages[:, None] * self.mask


def make_batch(seed: int, lengths: Sequence[int] = LENGTHS) -> Batch:
    """Probabilities in (0.05, 0.95), log-ratios ~ N(0, 0.8) (clipped, dual-clipped), advantages of both signs.

    Masked-out positions hold ordinary random values too: neither side may read them.
    """
    generator = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    mask = (torch.arange(WIDTH)[None, :] < torch.tensor(lengths)[:, None]).to(F64)
    old_logp = (0.05 + 0.9 * torch.rand(rows, WIDTH, generator=generator, dtype=F64)).log()
    noise = 0.8 * torch.randn(rows, WIDTH, generator=generator, dtype=F64)
    logp = (old_logp + noise).clamp(max=-1e-3)  # a probability below 1 (DPPO's binary KL takes log(1 - p))
    advantages = torch.randn(rows, generator=generator, dtype=F64)
    advantages[:2] = torch.tensor([1.3, -0.7], dtype=F64)  # both signs in every batch
    old_logp[1, 0], logp[1, 0] = math.log(0.1), math.log(0.6)  # ratio 6, advantage < 0: past the dual clip
    return Batch(logp, old_logp, advantages, mask)
