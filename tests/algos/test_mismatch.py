"""logprob_gap: the sampler/trainer log-prob distance over completion tokens, checked by hand."""

from __future__ import annotations

import math

import torch

from mmgrpo.algos import ISCorrection, importance_weights, logprob_gap, policy_loss


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


TRAINER = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.3, 0.3, 0.3]]))
SAMPLER = torch.log(torch.tensor([[0.25, 0.4, 0.1], [0.3, 0.6, 0.3]]))
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])  # token ratios 2, 0.5, 9 and 1, 0.5 (the last is padding)


def test_tis_weights_are_the_token_ratios_truncated_at_the_cap() -> None:
    weights, keep, stats = importance_weights(TRAINER, SAMPLER, MASK, ISCorrection("tis", "token", cap=2.0))
    torch.testing.assert_close(weights, torch.tensor([[2.0, 0.5, 2.0], [1.0, 0.5, 1.0]]))
    assert torch.equal(keep, MASK.bool())
    assert math.isclose(float(stats["ratio_mean"]), (2 + 0.5 + 9 + 1 + 0.5) / 5, rel_tol=1e-5)
    assert math.isclose(float(stats["ratio_max"]), 9.0, rel_tol=1e-5)
    assert math.isclose(float(stats["capped_frac"]), 1 / 5, rel_tol=1e-6)  # only the 9 (2 may round above 2)


def test_mis_drops_the_tokens_above_the_cap_and_keeps_the_others_weighted() -> None:
    weights, keep, stats = importance_weights(TRAINER, SAMPLER, MASK, ISCorrection("mis", "token", cap=3.0))
    assert keep.tolist() == [[True, True, False], [True, True, False]]
    torch.testing.assert_close(weights, torch.tensor([[2.0, 0.5, 0.0], [1.0, 0.5, 1.0]]))
    assert math.isclose(float(stats["capped_frac"]), 1 / 5, rel_tol=1e-6)


def test_sequence_level_ratios_are_the_product_over_the_completion() -> None:
    # row 1: 2 x 0.5 x 9 = 9; row 2: 1 x 0.5 = 0.5 (padding left out)
    weights, _, stats = importance_weights(TRAINER, SAMPLER, MASK, ISCorrection("tis", "sequence", cap=4.0))
    torch.testing.assert_close(weights, torch.tensor([[4.0, 4.0, 4.0], [0.5, 0.5, 1.0]]), rtol=1e-5, atol=1e-6)
    assert math.isclose(float(stats["capped_frac"]), 3 / 5, rel_tol=1e-6)
    _, keep, _ = importance_weights(TRAINER, SAMPLER, MASK, ISCorrection("mis", "sequence", cap=4.0))
    assert keep.tolist() == [[False, False, False], [True, True, False]]


def test_token_weights_scale_the_policy_gradient_but_not_the_kl() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.25]])).requires_grad_()
    old = logp.detach()
    advantages = torch.tensor([1.0])
    mask = torch.ones(1, 2)
    weights = torch.tensor([[2.0, 0.5]])
    plain, _ = policy_loss(logp, old, advantages, mask)
    weighted, _ = policy_loss(logp, old, advantages, mask, token_weights=weights)
    # ratio 1 everywhere: token losses are -A = -1, weighted -2 and -0.5; token-mean over 2 tokens
    assert math.isclose(float(plain), -1.0) and math.isclose(float(weighted), -1.25)
    (grad,) = torch.autograd.grad(weighted, logp)
    torch.testing.assert_close(grad, torch.tensor([[-1.0, -0.25]]))  # d/dlogp of -w * exp(logp - old) / 2
    ref = torch.log(torch.tensor([[0.4, 0.25]]))
    with_kl, stats = policy_loss(logp, old, advantages, mask, token_weights=weights, ref_logp=ref, beta=0.1)
    assert math.isclose(float(with_kl), -1.25 + 0.1 * float(stats["kl"]), rel_tol=1e-5)
