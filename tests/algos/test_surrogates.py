"""The policy losses besides PPO's clip (GSPO, GSPO-token, CISPO) and the entropy bonus, against their papers'
formulas written out here token by token, in float64."""

import math

import pytest
import torch

from mmgrpo.algos import policy_loss

LOGP = torch.tensor([[-1.0, -0.5, -2.0, 0.0], [-0.3, -0.7, 0.0, 0.0]], dtype=torch.float64)
OLD = torch.tensor([[-1.1, -0.4, -1.5, 0.0], [-0.3, -0.9, 0.0, 0.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
ADVANTAGES = torch.tensor([0.8, -1.2], dtype=torch.float64)


def _loss_and_grad(surrogate: str, advantages: torch.Tensor = ADVANTAGES, **options) -> tuple[float, torch.Tensor]:
    logp = LOGP.clone().requires_grad_()
    loss, _ = policy_loss(logp, OLD, advantages, MASK, surrogate=surrogate, **options)
    loss.backward()
    return loss.item(), logp.grad


def _gspo_by_hand(eps_low: float, eps_high: float, advantages: torch.Tensor) -> tuple[float, torch.Tensor]:
    """GSPO eqs. 5-7 with seq-mean-token-mean: loss = mean_i -min(s_i A_i, clip(s_i) A_i), s_i = exp(mean_t log
    r_i,t); d loss / d logp_i,t = -A_i s_i / |y_i| / G where the unclipped term is the minimum, else 0."""
    losses, grad = [], torch.zeros_like(LOGP)
    for i in range(2):
        n = int(MASK[i].sum())
        s = math.exp(sum(float(LOGP[i, t] - OLD[i, t]) for t in range(n)) / n)
        a = float(advantages[i])
        clipped = min(max(s, 1 - eps_low), 1 + eps_high)
        losses.append(-min(s * a, clipped * a))
        if s * a <= clipped * a:
            grad[i, :n] = -a * s / n / 2
    return sum(losses) / 2, grad


@pytest.mark.parametrize("sign", [1, -1], ids=["as-is", "flipped"])
@pytest.mark.parametrize("eps", [(3e-4, 4e-4), (0.2, 0.2)], ids=["paper", "wide"])
def test_gspo_and_gspo_token_equal_the_papers_sequence_objective(eps, sign):
    """With the advantages flipped at the paper's eps, the first sequence is clipped: no gradient."""
    expected_loss, expected_grad = _gspo_by_hand(*eps, sign * ADVANTAGES)
    if eps == (3e-4, 4e-4) and sign == -1:
        assert not bool(expected_grad[0].any())
    for surrogate in ("gspo", "gspo_token"):
        loss, grad = _loss_and_grad(surrogate, sign * ADVANTAGES, eps_low=eps[0], eps_high=eps[1],
                                    agg="seq-mean-token-mean")
        assert loss == pytest.approx(expected_loss, abs=1e-12), surrogate
        torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)


def test_gspo_needs_one_advantage_per_completion_and_gspo_token_takes_one_per_token():
    per_token = torch.tensor([[0.8, 0.5, 0.1, 0.0], [-1.2, -1.0, 0.0, 0.0]], dtype=torch.float64)
    for surrogate in ("gspo", "geo_mean"):
        with pytest.raises(ValueError, match="one advantage per completion"):
            _loss_and_grad(surrogate, per_token)
    _, grad = _loss_and_grad("gspo_token", per_token, agg="seq-mean-token-mean")
    ratios = [math.exp(float(((LOGP[i] - OLD[i]) * MASK[i]).sum()) / int(MASK[i].sum())) for i in range(2)]
    expected = torch.zeros_like(LOGP)
    for i in range(2):
        n = int(MASK[i].sum())
        expected[i, :n] = -per_token[i, :n] * ratios[i] / n / 2  # eq. 14: each token its own advantage
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


def test_cispo_weighs_every_tokens_gradient_by_its_clipped_ratio():
    """MiniMax-M1 eq. 4 with token-mean: d loss / d logp_t = -clip(r_t, 1 - eps_low, 1 + eps_high) A / N, also
    for the tokens whose ratio is clipped (PPO would give them no gradient)."""
    eps_low, eps_high = 1.0, 0.1
    loss, grad = _loss_and_grad("cispo", eps_low=eps_low, eps_high=eps_high)
    ratio = torch.exp(LOGP - OLD)
    weight = ratio.clamp(1 - eps_low, 1 + eps_high)
    advantages = ADVANTAGES[:, None].expand_as(LOGP)
    tokens = int(MASK.sum())
    expected_grad = torch.where(MASK.bool(), -weight * advantages / tokens, 0.0)
    torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)
    assert bool((ratio[MASK.bool()] > 1 + eps_high).any())  # a clipped weight that still has its gradient
    expected_loss = float(torch.where(MASK.bool(), -weight * advantages * LOGP, 0.0).sum()) / tokens
    assert loss == pytest.approx(expected_loss, abs=1e-12)


@pytest.mark.parametrize(("tau_pos", "tau_neg"), [(1.0, 1.05), (2.0, 8.0)])
def test_sapo_is_its_soft_gate_and_the_plain_gradient_at_ratio_one(tau_pos, tau_neg):
    """SAPO: loss_t = -sigmoid(tau (r - 1)) 4 / tau A, tau by the advantage's sign; d loss_t / d logp_t =
    -A 4 sigma (1 - sigma) r (token-mean over N tokens)."""
    options = {"surrogate_options": {"tau_pos": tau_pos, "tau_neg": tau_neg}}
    loss, grad = _loss_and_grad("sapo", **options)
    ratio, tokens = torch.exp(LOGP - OLD), int(MASK.sum())
    advantages = ADVANTAGES[:, None].expand_as(LOGP)
    tau = torch.where(advantages > 0, tau_pos, tau_neg).double()
    gate = torch.sigmoid(tau * (ratio - 1))
    inside = MASK.bool()
    assert loss == pytest.approx(float((-gate * 4 / tau * advantages)[inside].sum()) / tokens, abs=1e-12)
    torch.testing.assert_close(grad, torch.where(inside, -advantages * 4 * gate * (1 - gate) * ratio / tokens, 0.0))
    on_policy = LOGP.clone().requires_grad_()
    policy_loss(on_policy, LOGP, ADVANTAGES, MASK, surrogate="sapo", **options)[0].backward()
    torch.testing.assert_close(on_policy.grad, torch.where(inside, -advantages / tokens, 0.0))  # r = 1: plain PG


@pytest.mark.parametrize("sign", [1, -1], ids=["as-is", "flipped"])
@pytest.mark.parametrize("eps", [(0.4, 0.4), (0.05, 0.08)], ids=["paper", "tight"])
def test_geo_mean_is_gmpos_geometric_mean_of_clipped_ratios(eps, sign):
    """GMPO eq. 5 with seq-mean-token-mean: loss_i = -A_i prod_t min(r_t, clip(r_t))^(1/|o_i|) for A > 0 (max for
    A < 0, the clip in log space); d loss / d logp_t = -A_i g_i / |o_i| / G for an unclipped token, 0 for a clipped."""
    advantages = sign * ADVANTAGES
    loss, grad = _loss_and_grad("geo_mean", advantages, eps_low=eps[0], eps_high=eps[1], agg="seq-mean-token-mean")
    expected_loss, expected_grad = 0.0, torch.zeros_like(LOGP)
    for i in range(2):
        n, a = int(MASK[i].sum()), float(advantages[i])
        ratios = [math.exp(float(LOGP[i, t] - OLD[i, t])) for t in range(n)]
        bounded = [min(max(r, math.exp(-eps[0])), math.exp(eps[1])) for r in ratios]
        chosen = [min(r, b) if a > 0 else max(r, b) for r, b in zip(ratios, bounded)]
        mean_ratio = math.prod(chosen) ** (1 / n)
        expected_loss += -a * mean_ratio / 2
        for t in range(n):
            if chosen[t] == ratios[t]:
                expected_grad[i, t] = -a * mean_ratio / n / 2
    assert loss == pytest.approx(expected_loss, abs=1e-12)
    torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)
    if eps == (0.05, 0.08):
        assert bool((expected_grad[MASK.bool()] == 0).any())  # a clipped token: its gradient is off


def test_gpg_is_the_plain_policy_gradient_whatever_the_ratio():
    """GPG eq. 4 with token-mean: loss = -sum A log pi / N and d loss / d logp_t = -A / N, off-policy or not."""
    loss, grad = _loss_and_grad("gpg")
    advantages, inside, tokens = ADVANTAGES[:, None].expand_as(LOGP), MASK.bool(), int(MASK.sum())
    assert loss == pytest.approx(float((-advantages * LOGP)[inside].sum()) / tokens, abs=1e-12)
    torch.testing.assert_close(grad, torch.where(inside, -advantages / tokens, 0.0))


def test_dual_clip_belongs_to_ppos_clip_only():
    for surrogate in ("gspo", "gspo_token", "cispo", "sapo", "gpg", "geo_mean"):
        with pytest.raises(ValueError, match="dual_clip"):
            _loss_and_grad(surrogate, dual_clip=3.0)


def test_the_entropy_bonus_lowers_the_loss_by_its_aggregate_and_pushes_entropy_up():
    logp = LOGP.clone().requires_grad_()
    entropy = torch.tensor([[1.0, 2.0, 3.0, 50.0], [0.5, 1.5, 50.0, 50.0]], dtype=torch.float64, requires_grad=True)
    plain, _ = policy_loss(logp, OLD, ADVANTAGES, MASK)
    bonus, stats = policy_loss(logp, OLD, ADVANTAGES, MASK, entropy=entropy, entropy_coeff=0.01)
    assert float(bonus) == pytest.approx(float(plain) - 0.01 * (1 + 2 + 3 + 0.5 + 1.5) / 5, abs=1e-12)
    assert float(stats["pg_loss"]) == pytest.approx(float(plain), abs=1e-6)  # the logged pg_loss has no bonus
    bonus.backward()
    torch.testing.assert_close(entropy.grad, torch.where(MASK.bool(), -0.01 / 5, 0.0).double())
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(logp, OLD, ADVANTAGES, MASK, entropy_coeff=0.01)
