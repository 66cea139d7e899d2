"""The pure decoding-step functions on hand-made logits."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from mmgrpo.rollout import sampling
from mmgrpo.rollout.base import SamplingParams

NEG_INF = float("-inf")


def kept(logits: torch.Tensor) -> list[set[int]]:
    """Column indices left finite in each row."""
    return [set(torch.nonzero(torch.isfinite(row)).flatten().tolist()) for row in logits]


def log_probs(*probs: float) -> torch.Tensor:
    return torch.tensor([[math.log(p) for p in probs]])


def test_top_k_keeps_the_k_largest_per_row() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0, 5.0], [4.0, -1.0, 0.5, 2.5, 0.0]])
    assert kept(sampling.top_k_filter(logits, 2)) == [{4, 1}, {0, 3}]
    assert kept(sampling.top_k_filter(logits, 1)) == [{4}, {0}]


def test_top_k_keeps_ties_at_the_boundary_and_zero_disables() -> None:
    logits = torch.tensor([[1.0, 2.0, 2.0, 0.0]])
    assert kept(sampling.top_k_filter(logits, 2)) == [{1, 2}]
    assert kept(sampling.top_k_filter(logits, 1)) == [{1, 2}]
    assert torch.equal(sampling.top_k_filter(logits, 0), logits)


def test_top_p_keeps_the_smallest_prefix_reaching_p() -> None:
    logits = log_probs(0.15, 0.5, 0.05, 0.3)  # ranked: 1 (0.5), 3 (0.3), 0 (0.15), 2 (0.05)
    assert kept(sampling.top_p_filter(logits, 0.45)) == [{1}]
    assert kept(sampling.top_p_filter(logits, 0.7)) == [{1, 3}]
    assert kept(sampling.top_p_filter(logits, 0.85)) == [{1, 3, 0}]
    assert kept(sampling.top_p_filter(logits, 0.99)) == [{0, 1, 2, 3}]
    assert kept(sampling.top_p_filter(logits, 1.0)) == [{0, 1, 2, 3}]


@pytest.mark.parametrize("k,p", [(5, 1.0), (0, 0.9), (20, 0.6)])
def test_filters_agree_with_transformers_warpers(k: int, p: float) -> None:
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(k))
    ours = sampling.top_p_filter(sampling.top_k_filter(logits, k), p)
    theirs = logits
    if k:
        theirs = TopKLogitsWarper(k)(None, theirs)
    if p < 1:
        theirs = TopPLogitsWarper(p)(None, theirs)
    assert kept(ours) == kept(theirs)


def test_temperature_applies_before_top_p() -> None:
    logits = log_probs(0.5, 0.3, 0.15, 0.05)
    sharp = SamplingParams(temperature=0.5, top_p=0.65)
    flat = SamplingParams(temperature=1.0, top_p=0.65)
    assert kept(sampling.processed_logits(logits, sharp)) == [{0}]  # 0.5^2 / sum = 0.69 >= 0.65
    assert kept(sampling.processed_logits(logits, flat)) == [{0, 1}]


def test_processed_logits_masks_forbidden_ids_even_when_greedy() -> None:
    logits = torch.tensor([[0.0, 9.0, 1.0, 2.0]])
    greedy = sampling.processed_logits(logits, SamplingParams(temperature=0), forbidden_ids=[1])
    assert kept(greedy) == [{0, 2, 3}]
    assert sampling.draw_tokens(greedy, greedy=True).tolist() == [3]
    assert torch.equal(logits, torch.tensor([[0.0, 9.0, 1.0, 2.0]]))  # input untouched


def test_draw_tokens_is_reproducible_and_never_draws_filtered_ids() -> None:
    logits = torch.zeros(64, 6)
    logits[:, [0, 5]] = NEG_INF

    def draw(seed: int) -> torch.Tensor:
        return sampling.draw_tokens(logits, greedy=False, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(draw(3), draw(3))
    tokens = torch.cat([draw(seed) for seed in range(5)])
    assert set(tokens.tolist()) == {1, 2, 3, 4}


def test_drawn_tokens_follow_the_distribution() -> None:
    """100k draws of p = (0.1, 0, 0.6, 0.3, 0 masked last): frequencies within 4 standard errors."""
    probabilities = torch.tensor([0.1, 0.0, 0.6, 0.3, 0.0])
    logits = probabilities.log().expand(100_000, -1)  # log 0 = -inf: never drawn
    drawn = sampling.draw_tokens(logits, greedy=False, generator=torch.Generator().manual_seed(0))
    frequencies = torch.bincount(drawn, minlength=5).double() / len(drawn)
    standard_errors = (probabilities * (1 - probabilities) / len(drawn)).sqrt().double()
    assert frequencies[1] == 0 and frequencies[4] == 0
    assert ((frequencies - probabilities.double()).abs() <= 4 * standard_errors + 1e-12).all(), frequencies


def test_a_uniform_draw_at_the_top_never_lands_past_the_last_drawable_token(monkeypatch) -> None:
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.ones(args[0]) * (1 - 1e-8))
    logits = torch.tensor([[0.0, 0.0, NEG_INF]])
    assert sampling.draw_tokens(logits, greedy=False).tolist() == [1]


def test_token_logprobs_gathers_the_log_softmax() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    result = sampling.token_logprobs(logits, torch.tensor([2, 1]))
    expected = torch.tensor([3.0 - torch.logsumexp(logits[0], 0), -math.log(3)])
    torch.testing.assert_close(result, expected)


def test_completion_lengths_keep_the_first_stop_token() -> None:
    token_ids = torch.tensor([[5, 7, 3, 7], [1, 2, 3, 4], [8, 0, 0, 0]])
    lengths, stopped = sampling.completion_lengths(token_ids, torch.tensor([7, 8]))
    assert lengths.tolist() == [2, 4, 1]
    assert stopped.tolist() == [True, False, True]
