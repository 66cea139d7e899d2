"""Masked reductions and chunked entropy."""

import math

import pytest
import torch

from mmgrpo.algos import entropy_from_logits, masked_mean, masked_sum, masked_var, masked_whiten

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, float("nan"), float("inf")]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


def test_masked_sum_and_mean_ignore_garbage_outside_the_mask():
    assert masked_sum(X, MASK).item() == 7.0
    assert masked_mean(X, MASK).item() == pytest.approx(7.0 / 3)
    torch.testing.assert_close(masked_mean(X, MASK, dim=-1), torch.tensor([1.5, 4.0]))
    torch.testing.assert_close(masked_sum(X, MASK, dim=0), torch.tensor([5.0, 2.0, 0.0]))


def test_masked_mean_of_nothing_is_zero():
    assert masked_mean(X, torch.zeros_like(MASK)).item() == 0.0
    torch.testing.assert_close(
        masked_mean(X, torch.tensor([[1, 0, 0], [0, 0, 0]]), dim=-1), torch.tensor([1.0, 0.0])
    )


def test_masked_gradient_is_zero_outside_the_mask():
    x = X.clone().requires_grad_(True)
    masked_mean(x, MASK).backward()
    torch.testing.assert_close(x.grad, MASK.float() / 3)


def test_masked_var_is_bessel_corrected():
    x, mask = torch.tensor([1.0, 3.0, 5.0, 100.0]), torch.tensor([1, 1, 1, 0])
    assert masked_var(x, mask).item() == 4.0
    assert masked_var(x, mask, unbiased=False).item() == pytest.approx(8 / 3)
    assert masked_var(x, torch.tensor([1, 0, 0, 0])).item() == 0.0


def test_masked_whiten_hand_values():
    x, mask = torch.tensor([1.0, 3.0, 5.0, 100.0]), torch.tensor([1, 1, 1, 0])  # mean 3, var 4
    torch.testing.assert_close(masked_whiten(x, mask, eps=0.0), torch.tensor([-1.0, 0.0, 1.0, 0.0]))
    torch.testing.assert_close(
        masked_whiten(x, mask, shift_mean=False, eps=0.0), torch.tensor([2.0, 3.0, 4.0, 0.0])
    )


def test_entropy_hand_values():
    vocab = 7
    logits = torch.zeros(1, 2, vocab)
    logits[0, 1, 3] = 1e4  # all mass on one token
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([[math.log(vocab), 0.0]]))
    p = torch.tensor([0.5, 0.25, 0.25])
    torch.testing.assert_close(
        entropy_from_logits(p.log().view(1, 1, 3)), torch.tensor([[1.5 * math.log(2)]])
    )


@pytest.mark.parametrize("chunk_size", [1, 3, 5, 1000])
def test_entropy_chunks_agree_with_the_direct_formula(chunk_size):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11, dtype=torch.bfloat16) * 4
    probs = torch.softmax(logits.float(), dim=-1)
    direct = -(probs * torch.log_softmax(logits.float(), dim=-1)).sum(-1)
    out = entropy_from_logits(logits, chunk_size=chunk_size)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, direct, atol=1e-5, rtol=1e-5)


def test_entropy_mask_zeroes_positions_and_gradient_flows():
    logits = torch.randn(2, 4, 6, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])
    entropy = entropy_from_logits(logits, mask, chunk_size=3)
    assert (entropy[mask == 0] == 0).all() and (entropy[mask == 1] > 0).all()
    entropy.sum().backward()
    assert (logits.grad[mask == 0] == 0).all() and logits.grad[mask == 1].abs().sum() > 0


def test_entropy_rejects_bad_shapes():
    with pytest.raises(ValueError, match="\\[B, T, V\\]"):
        entropy_from_logits(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="chunk_size"):
        entropy_from_logits(torch.zeros(1, 2, 3), chunk_size=0)
