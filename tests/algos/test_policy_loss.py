"""policy_loss: clipped surrogate, dual clip, KL term, aggregations, stats, masking."""

import math
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrpo.algos import LOSS_AGGREGATIONS, policy_loss
from mmgrpo.registry import RegistryError

FAST = settings(max_examples=50, deadline=None)
AGGREGATIONS = LOSS_AGGREGATIONS.names()


def one_token(ratio: float, advantage: float, **options) -> tuple[float, dict[str, float]]:
    """Loss and stats of a single token whose importance ratio is ``ratio``."""
    logp = torch.tensor([[math.log(ratio)]])
    loss, stats = policy_loss(logp, torch.zeros(1, 1), torch.tensor([advantage]), torch.ones(1, 1), **options)
    return loss.item(), {name: value.item() for name, value in stats.items()}


@pytest.mark.parametrize(
    "ratio, advantage, options, expected_loss, clipped",
    [
        (1.5, 1.0, {}, -1.2, "clip_frac_high"),  # -min(1.5, 1.2)
        (1.25, 1.0, {"eps_high": 0.28}, -1.25, None),  # clip-higher leaves room
        (0.5, 1.0, {}, -0.5, None),  # -min(0.5, 0.8): no floor for A > 0
        (0.5, -1.0, {}, 0.8, "clip_frac_low"),  # -min(-0.5, -0.8)
        (0.5, -1.0, {"eps_low": 0.6}, 0.5, None),
        (1.5, -1.0, {}, 1.5, None),  # -min(-1.5, -1.2): PPO leaves A < 0 unbounded
        (5.0, -1.0, {"dual_clip": 3.0}, 3.0, "dual_clip_frac"),  # capped at -3 * A
        (2.5, -1.0, {"dual_clip": 3.0}, 2.5, None),
        (5.0, 2.0, {"dual_clip": 3.0}, -2.4, "clip_frac_high"),  # dual clip is for A < 0 only
    ],
)
def test_single_token_hand_values(ratio, advantage, options, expected_loss, clipped):
    loss, stats = one_token(ratio, advantage, **options)
    assert loss == pytest.approx(expected_loss, rel=1e-6)
    assert stats["pg_loss"] == pytest.approx(expected_loss, rel=1e-6)
    for name in ("clip_frac_low", "clip_frac_high", "dual_clip_frac"):
        assert stats[name] == (1.0 if name == clipped else 0.0), name
    assert stats["clip_frac"] == stats["clip_frac_low"] + stats["clip_frac_high"]


# Ragged batch at ratio 1, so each token's loss is -A: rows hold tokens [1, 2, 3] and [4].
RAGGED_ADV = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 99.0, 99.0, 99.0]])
RAGGED_MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize(
    "agg, expected",
    [
        ("token-mean", -(1 + 2 + 3 + 4) / 4),
        ("seq-mean-token-mean", -((1 + 2 + 3) / 3 + 4 / 1) / 2),
        ("seq-mean-token-sum-norm", -((1 + 2 + 3) / 8 + 4 / 8) / 2),  # max_len 8
    ],
)
def test_aggregations_hand_values(agg, expected):
    logp = torch.zeros(2, 4)
    loss, _ = policy_loss(logp, logp, RAGGED_ADV, RAGGED_MASK, agg=agg, max_len=8)
    assert loss.item() == pytest.approx(expected)


def test_sequence_advantages_broadcast_over_tokens():
    logp = torch.zeros(2, 4)
    loss, _ = policy_loss(logp, logp, torch.tensor([1.0, 4.0]), RAGGED_MASK, agg="seq-mean-token-mean")
    assert loss.item() == pytest.approx(-(1.0 + 4.0) / 2)


def test_token_sum_norm_needs_max_len():
    with pytest.raises(ValueError, match="max_len"):
        policy_loss(
            torch.zeros(1, 2),
            torch.zeros(1, 2),
            torch.ones(1),
            torch.ones(1, 2),
            agg="seq-mean-token-sum-norm",
        )


@pytest.mark.parametrize(
    "kind, token_kl", [("k3", [math.e - 2, math.exp(-1)]), ("k2", [0.5, 0.5]), ("k1", [-1.0, 1.0])]
)
def test_kl_term_is_added_per_token(kind, token_kl):
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[0.0, -3.0]])  # log-ratio to the reference: [-1, 1]
    loss, stats = policy_loss(
        logp, logp, torch.tensor([1.0]), torch.ones(1, 2), ref_logp=ref, beta=0.5, kl=kind
    )
    kl_mean = sum(token_kl) / 2
    assert stats["kl"].item() == pytest.approx(kl_mean)
    assert stats["pg_loss"].item() == pytest.approx(-1.0)
    assert loss.item() == pytest.approx(-1.0 + 0.5 * kl_mean)


def test_kl_is_reported_but_not_added_when_beta_is_zero():
    logp, ref = torch.tensor([[-1.0]]), torch.tensor([[0.0]])
    loss, stats = policy_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 1), ref_logp=ref)
    assert loss.item() == -1.0 and stats["kl"].item() == pytest.approx(math.e - 2)


def test_ratio_stats_cover_masked_tokens_only():
    logp = torch.log(torch.tensor([[0.5, 2.0, 1e9], [1.5, 1e9, 1e9]]))
    _, stats = policy_loss(logp, torch.zeros(2, 3), torch.ones(2), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert stats["ratio_mean"].item() == pytest.approx(4.0 / 3)
    assert stats["ratio_max"].item() == pytest.approx(2.0)
    assert stats["ratio_min"].item() == pytest.approx(0.5)
    assert all(value.dim() == 0 and not value.requires_grad for value in stats.values())


def test_empty_mask_gives_zero_loss_and_neutral_stats():
    logp = torch.randn(2, 3, requires_grad=True)
    loss, stats = policy_loss(logp, torch.zeros(2, 3), torch.ones(2), torch.zeros(2, 3))
    loss.backward()
    assert loss.item() == 0.0 and (logp.grad == 0).all()
    assert stats["ratio_max"].item() == stats["ratio_min"].item() == 1.0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"eps_low": 1.5}, "eps_low"),
        ({"eps_high": -0.1}, "eps_high"),
        ({"dual_clip": 1.0}, "dual_clip must be > 1"),
        ({"beta": 0.1}, "ref_logp"),
        ({"old_logp": torch.zeros(2, 2)}, "old_logp has shape"),
        ({"advantages": torch.ones(3)}, "advantages must be"),
        ({"ref_logp": torch.zeros(3)}, "ref_logp has shape"),
    ],
)
def test_bad_input_is_named(change, message):
    call = {
        "logp": torch.zeros(2, 3),
        "old_logp": torch.zeros(2, 3),
        "advantages": torch.ones(2),
        "mask": torch.ones(2, 3),
    }
    call |= change
    with pytest.raises(ValueError, match=message):
        policy_loss(**call)


def test_unknown_aggregation_lists_known_ones():
    with pytest.raises(RegistryError, match="token-mean"):
        policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1), agg="token-sum")


@dataclass
class TokenBatch:
    logp: torch.Tensor  # [B, T]
    old_logp: torch.Tensor  # [B, T]
    ref_logp: torch.Tensor  # [B, T]
    advantages: torch.Tensor  # [B] or [B, T]
    mask: torch.Tensor  # [B, T] bool, ragged rows

    def token_advantages(self) -> torch.Tensor:  # [B, T]
        return (
            self.advantages
            if self.advantages.dim() == 2
            else self.advantages.unsqueeze(-1).expand_as(self.logp)
        )

    def loss(self, logp: torch.Tensor | None = None, **options):
        logp = self.logp if logp is None else logp
        return policy_loss(logp, self.old_logp, self.advantages, self.mask, ref_logp=self.ref_logp, **options)


@st.composite
def token_batches(draw) -> TokenBatch:
    batch, seq_len = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(0, seq_len), min_size=batch, max_size=batch).filter(any))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    logp = -torch.rand(batch, seq_len, generator=generator, dtype=torch.float64) * 3
    advantage_shape = (batch, seq_len) if draw(st.booleans()) else (batch,)
    return TokenBatch(
        logp=logp,
        old_logp=logp + torch.randn(batch, seq_len, generator=generator, dtype=torch.float64) * 0.4,
        ref_logp=logp + torch.randn(batch, seq_len, generator=generator, dtype=torch.float64) * 0.4,
        advantages=torch.randn(advantage_shape, generator=generator, dtype=torch.float64),
        mask=torch.arange(seq_len) < torch.tensor(lengths).unsqueeze(-1),
    )


def grad_of(loss_fn, logp: torch.Tensor) -> torch.Tensor:
    leaf = logp.detach().clone().requires_grad_(True)
    loss_fn(leaf).backward()
    return leaf.grad


@FAST
@given(token_batches(), st.sampled_from(AGGREGATIONS))
def test_at_ratio_one_the_gradient_is_the_plain_policy_gradient(batch, agg):
    aggregate = LOSS_AGGREGATIONS.get(agg)

    def plain_policy_gradient_loss(logp):
        return aggregate(-batch.token_advantages() * logp, batch.mask, max_len=6)

    def clipped_loss_on_policy(logp):
        return policy_loss(logp, logp.detach(), batch.advantages, batch.mask, agg=agg, max_len=6)[0]

    expected = grad_of(plain_policy_gradient_loss, batch.logp)
    torch.testing.assert_close(grad_of(clipped_loss_on_policy, batch.logp), expected)


@FAST
@given(token_batches(), st.sampled_from([None, 1.5, 3.0]))
def test_clip_fractions_count_exactly_the_tokens_without_gradient(batch, dual_clip):
    options = {"eps_low": 0.1, "eps_high": 0.15, "dual_clip": dual_clip}
    _, stats = batch.loss(**options)
    gradient = grad_of(lambda logp: batch.loss(logp, **options)[0], batch.logp)  # token-mean
    advantages = batch.token_advantages()
    switched_off = batch.mask & (gradient == 0) & (advantages != 0)
    tokens = batch.mask.sum().item()
    clipped = (stats["clip_frac"] + stats["dual_clip_frac"]).item()
    assert clipped * tokens == pytest.approx(switched_off.sum().item())
    ratio = (batch.logp - batch.old_logp).exp()
    expected_high = (batch.mask & (ratio > 1.15) & (advantages > 0)).sum().item()
    assert stats["clip_frac_high"].item() * tokens == pytest.approx(expected_high)


@FAST
@given(token_batches())
def test_aggregations_follow_their_definitions_on_ragged_masks(batch):
    losses, max_len = batch.logp, 7
    rows = [row[keep] for row, keep in zip(losses, batch.mask, strict=True) if keep.any()]
    expected = {
        "token-mean": torch.cat(rows).mean(),
        "seq-mean-token-mean": torch.stack([row.mean() for row in rows]).mean(),
        "seq-mean-token-sum-norm": torch.stack([row.sum() / max_len for row in rows]).mean(),
    }
    for name, value in expected.items():
        torch.testing.assert_close(LOSS_AGGREGATIONS.get(name)(losses, batch.mask, max_len=max_len), value)


GARBAGE = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30])


@FAST
@given(token_batches(), st.sampled_from(AGGREGATIONS), st.integers(0, 3))
def test_masked_tokens_never_influence_loss_or_gradient(batch, agg, garbage_index):
    options = {"agg": agg, "max_len": 6, "beta": 0.1, "dual_clip": 3.0}
    outside = ~batch.mask
    garbage = GARBAGE[garbage_index].to(batch.logp.dtype)
    dirty = TokenBatch(
        logp=batch.logp.masked_fill(outside, garbage),
        old_logp=batch.old_logp.masked_fill(outside, garbage),
        ref_logp=batch.ref_logp.masked_fill(outside, garbage),
        advantages=batch.advantages.masked_fill(outside, garbage)
        if batch.advantages.dim() == 2
        else batch.advantages,
        mask=batch.mask,
    )
    clean_loss, clean_stats = batch.loss(**options)
    dirty_loss, dirty_stats = dirty.loss(**options)
    torch.testing.assert_close(dirty_loss, clean_loss)
    torch.testing.assert_close(dirty_stats, clean_stats)
    dirty_grad = grad_of(lambda logp: dirty.loss(logp, **options)[0], dirty.logp)
    torch.testing.assert_close(dirty_grad, grad_of(lambda logp: batch.loss(logp, **options)[0], batch.logp))
    assert (dirty_grad[outside] == 0).all()


def test_bf16_log_probs_are_clipped_in_float32():
    logp = torch.full((1, 1), math.log(1.19), dtype=torch.bfloat16, requires_grad=True)
    loss, stats = policy_loss(logp, torch.zeros(1, 1, dtype=torch.bfloat16), torch.ones(1), torch.ones(1, 1))
    loss.backward()
    assert loss.dtype == torch.float32 and logp.grad.dtype == torch.bfloat16
    assert stats["ratio_max"].item() == pytest.approx(float(logp.detach().float().exp()), rel=1e-6)
