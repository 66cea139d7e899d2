"""DPPO (TV and binary KL), DRO, Clip-Cov and KL-Cov against their papers' formulas written out token by token in
float64 (token-mean over the completion tokens): the loss and its gradient with respect to each token's log-prob."""

import math

import pytest
import torch

from mmgrpo.algos import policy_loss

# Row 0 (A > 0): token 1 gained 0.54 of probability, token 2 lost 0.26. Row 1 (A < 0): token 0 lost 0.47,
# token 1 gained 0.07. Position 3 of row 0 and 2-3 of row 1 are padding.
LOGP = torch.tensor([[-1.0, -0.1, -2.0, 0.0], [-1.5, -0.7, -0.2, 0.0]], dtype=torch.float64)
OLD = torch.tensor([[-1.1, -1.0, -0.9, 0.0], [-0.3, -0.9, 0.0, 0.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
ADVANTAGES = torch.tensor([0.8, -1.2], dtype=torch.float64)
INSIDE = MASK.bool()
TOKENS = int(MASK.sum())


def _loss_and_grad(surrogate: str, advantages: torch.Tensor = ADVANTAGES, logp: torch.Tensor = LOGP,
                   **options) -> tuple[float, torch.Tensor, dict]:
    logp = logp.clone().requires_grad_()
    loss, stats = policy_loss(logp, OLD, advantages, MASK, surrogate=surrogate, **options)
    loss.backward()
    return loss.item(), logp.grad, stats


def _binary_kl(old: float, new: float) -> float:
    p, q = math.exp(old), math.exp(new)
    return p * (old - new) + (1 - p) * math.log((1 - p + 1e-8) / (1 - q + 1e-8))


def _stays_tv(a: float, old: float, new: float, low: float, high: float) -> bool:
    moved = math.exp(new) - math.exp(old)
    return moved <= high if a > 0 else moved >= -low


def _stays_kl(a: float, old: float, new: float, low: float, high: float) -> bool:
    p, q = math.exp(old), math.exp(new)
    return (_binary_kl(old, new) <= high or q <= p) if a > 0 else (_binary_kl(old, new) <= low or q >= p)


@pytest.mark.parametrize(("surrogate", "stays", "thresholds"), [
    ("dppo_tv", _stays_tv, (0.15, 0.15)), ("dppo_kl", _stays_kl, (0.05, 0.05)), ("dppo_tv", _stays_tv, (0.5, 0.6)),
], ids=["tv-paper", "kl-paper", "tv-wide"])
@pytest.mark.parametrize("cap", [20.0, 1.5])
def test_dppo_is_the_truncated_policy_gradient_inside_the_divergence_region(surrogate, stays, thresholds, cap):
    """DPPO: loss_t = -A sg[min(r_t, cap)] log pi_t if the token stays in the region, else 0; d loss / d logp_t =
    -A min(r_t, cap) / N inside, 0 outside."""
    low, high = thresholds
    loss, grad, stats = _loss_and_grad(surrogate, eps_low=low, eps_high=high,
                                       surrogate_options={"dppo_ratio_cap": cap})
    expected_loss, expected_grad, left = 0.0, torch.zeros_like(LOGP), 0
    for i, t in INSIDE.nonzero().tolist():
        a, new, old = float(ADVANTAGES[i]), float(LOGP[i, t]), float(OLD[i, t])
        if stays(a, old, new, low, high):
            weight = min(math.exp(new - old), cap)
            expected_loss += -a * weight * new / TOKENS
            expected_grad[i, t] = -a * weight / TOKENS
        else:
            left += 1
    assert loss == pytest.approx(expected_loss, abs=1e-12)
    torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)
    assert float(stats["clip_frac"]) == pytest.approx(left / TOKENS)
    if thresholds == (0.15, 0.15):
        assert left == 2  # the two tokens that moved most in their advantage's direction


def test_dppo_with_the_advantages_flipped_keeps_the_other_tokens():
    """A token that moved against its advantage is always kept; flipping the sign changes which ones those are."""
    _, as_is, _ = _loss_and_grad("dppo_tv", eps_low=0.15, eps_high=0.15)
    _, flipped, _ = _loss_and_grad("dppo_tv", -ADVANTAGES, eps_low=0.15, eps_high=0.15)
    assert (as_is[INSIDE] == 0).tolist() != (flipped[INSIDE] == 0).tolist()


@pytest.mark.parametrize("beta", [0.05, 1.0])
def test_dro_is_the_policy_gradient_minus_its_quadratic_log_ratio_penalty(beta):
    """DRO: loss_t = -(A log pi_t - beta / 2 (log pi_t - log pi_old,t)^2); d loss / d logp_t = -(A - beta (log
    pi_t - log pi_old,t)) / N; on policy it is the plain policy gradient."""
    loss, grad, _ = _loss_and_grad("dro", surrogate_options={"dro_beta": beta})
    advantages = ADVANTAGES[:, None].expand_as(LOGP)
    log_ratio = LOGP - OLD
    expected = -(advantages * LOGP - 0.5 * beta * log_ratio.square())
    assert loss == pytest.approx(float(expected[INSIDE].sum()) / TOKENS, abs=1e-12)
    torch.testing.assert_close(grad, torch.where(INSIDE, -(advantages - beta * log_ratio) / TOKENS, 0.0))
    with pytest.raises(ValueError, match="dro_beta"):
        _loss_and_grad("dro", surrogate_options={"dro_beta": 0.0})


def _covariance() -> torch.Tensor:
    """Each token's (A - mean A)(log pi - mean log pi) over the completion tokens, written out."""
    advantages = ADVANTAGES[:, None].expand_as(LOGP)
    mean_a = float(advantages[INSIDE].mean())
    mean_logp = float(LOGP[INSIDE].mean())
    return (advantages - mean_a) * (LOGP - mean_logp)


def _ppo_grad(eps: float) -> torch.Tensor:
    """PPO's clipped surrogate's gradient per token (token-mean): -A r / N unless the clip is active."""
    advantages = ADVANTAGES[:, None].expand_as(LOGP)
    ratio = torch.exp(LOGP - OLD)
    clipped = ((ratio > 1 + eps) & (advantages > 0)) | ((ratio < 1 - eps) & (advantages < 0))
    return torch.where(INSIDE & ~clipped, -advantages * ratio / TOKENS, 0.0)


def test_clip_cov_detaches_a_random_few_of_the_unclipped_tokens_with_covariance_in_its_bounds():
    """Bounds (lb, ub) around the tokens' covariances: with the ratio at 1 every candidate loses its gradient, with
    one token's worth exactly one does, drawn by torch.randperm (reproducible under the same seed)."""
    eps, covariance = 0.2, _covariance()
    reference = _ppo_grad(eps)
    candidates = INSIDE & (reference != 0) & (covariance > -0.5) & (covariance < 0.1)
    assert 2 <= int(candidates.sum()) < int((reference != 0).sum())  # some tokens kept, some to draw among
    options = {"clip_cov_lb": -0.5, "clip_cov_ub": 0.1}
    _, grad, stats = _loss_and_grad("clip_cov", eps_low=eps, eps_high=eps,
                                    surrogate_options=options | {"clip_cov_ratio": 1.0})
    torch.testing.assert_close(grad, torch.where(candidates, 0.0, reference))
    ppo_fraction = float(policy_loss(LOGP, OLD, ADVANTAGES, MASK, eps_low=eps, eps_high=eps)[1]["clip_frac"])
    assert float(stats["clip_frac"]) == pytest.approx(ppo_fraction + int(candidates.sum()) / TOKENS)
    draws = []
    for seed in (0, 0, 1, 2, 3):
        torch.manual_seed(seed)
        _, grad, _ = _loss_and_grad("clip_cov", eps_low=eps, eps_high=eps,
                                    surrogate_options=options | {"clip_cov_ratio": 1 / TOKENS})
        detached = (~torch.isclose(grad, reference, rtol=0, atol=1e-12)).nonzero().tolist()
        assert len(detached) == 1 and candidates[tuple(detached[0])] and grad[tuple(detached[0])] == 0
        draws.append(tuple(detached[0]))
    assert draws[0] == draws[1] and len(set(draws)) > 1
    for seed in range(6):  # bounds around every token: still only PPO's unclipped ones are drawn
        torch.manual_seed(seed)
        _, grad, _ = _loss_and_grad("clip_cov", eps_low=eps, eps_high=eps, surrogate_options={
            "clip_cov_lb": -10.0, "clip_cov_ub": 10.0, "clip_cov_ratio": 1 / TOKENS})
        assert int((~torch.isclose(grad, reference, rtol=0, atol=1e-12)).sum()) == 1


def test_clip_cov_with_no_covariance_in_its_bounds_is_ppos_clip():
    for options in ({"clip_cov_lb": 1.0, "clip_cov_ub": 5.0}, {"clip_cov_lb": 0.0, "clip_cov_ub": 1e-9}):
        _, grad, _ = _loss_and_grad("clip_cov", eps_low=0.2, eps_high=0.2,
                                    surrogate_options=options | {"clip_cov_ratio": 1.0})
        torch.testing.assert_close(grad, _ppo_grad(0.2))


@pytest.mark.parametrize("coef", [1.0, 0.3])
def test_kl_cov_penalises_the_largest_covariance_tokens_by_their_absolute_log_ratio(coef):
    """KL-Cov: loss_t = -A r_t, plus coef |log r_t| on the top-k covariance tokens (k = max(ratio N, 1)); d loss /
    d logp_t = -A r_t / N (+ coef sign(log r_t) / N), no clip."""
    covariance = _covariance().masked_fill(~INSIDE, -math.inf)
    order = covariance.flatten().argsort(descending=True)
    advantages = ADVANTAGES[:, None].expand_as(LOGP)
    ratio, log_ratio = torch.exp(LOGP - OLD), LOGP - OLD
    for k in (1, 3):
        top = torch.zeros(LOGP.numel(), dtype=torch.bool)
        top[order[:k]] = True
        top = top.view_as(LOGP)
        loss, grad, _ = _loss_and_grad("kl_cov", surrogate_options={"kl_cov_ratio": k / TOKENS, "kl_cov_coef": coef})
        expected = -advantages * ratio + coef * log_ratio.abs() * top
        assert loss == pytest.approx(float(expected[INSIDE].sum()) / TOKENS, abs=1e-12)
        expected_grad = (-advantages * ratio + coef * torch.sign(log_ratio) * top) / TOKENS
        torch.testing.assert_close(grad, torch.where(INSIDE, expected_grad, 0.0))


def test_the_new_losses_refuse_dual_clip_and_a_ratio_of_no_tokens():
    for surrogate in ("dppo_tv", "dppo_kl", "dro", "clip_cov", "kl_cov"):
        with pytest.raises(ValueError, match="dual_clip"):
            _loss_and_grad(surrogate, dual_clip=3.0)
    for surrogate, key in (("clip_cov", "clip_cov_ratio"), ("kl_cov", "kl_cov_ratio")):
        with pytest.raises(ValueError, match="ratio > 0"):
            _loss_and_grad(surrogate, surrogate_options={key: 0.0})
