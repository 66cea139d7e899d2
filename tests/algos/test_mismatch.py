"""logprob_gap: the sampler/trainer log-prob distance over completion tokens, checked by hand."""

from __future__ import annotations

import math

import torch

from mmgrpo.algos import logprob_gap


def test_gap_is_the_masked_mean_and_max_of_absolute_differences() -> None:
    sampler = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    trainer = torch.tensor([[-1.5, -2.0, -2.0], [-0.25, float("nan"), 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    gap = logprob_gap(sampler, trainer, mask)
    # |diffs| on masked-in tokens: 0.5, 0, 1, 0.25 (the NaN sits in padding and never leaks)
    assert math.isclose(float(gap["mean"]), (0.5 + 0 + 1 + 0.25) / 4)
    assert float(gap["max"]) == 1.0


def test_gap_of_no_tokens_is_zero() -> None:
    gap = logprob_gap(torch.ones(2, 3), torch.zeros(2, 3), torch.zeros(2, 3))
    assert float(gap["mean"]) == 0.0 and float(gap["max"]) == 0.0
