"""mmgrpo's policy losses and advantage estimators against verl's own ``core_algos`` (issue #32), in float64.

Each surrogate is called on both sides with the same random batch: masks of uneven lengths (a one-token row, a
fully masked row), advantages of both signs, ratios far enough from 1 that every clip branch is taken; the loss
and its gradient with respect to the current log-probs must agree to 1e-6, for each aggregation verl applies.
Estimators are compared on groups of different sizes, including a group whose rewards are all equal.

Differences that are by design are pinned by their own tests (so a change on either side shows):

- ``geo_mean``: verl averages the sequence losses over every row (``torch.mean``), a fully masked one included;
  mmgrpo's ``seq-mean-token-mean`` leaves such a row out.
- A group of one: verl keeps its reward (mean 0, std 1), mmgrpo gives it advantage 0.

Run in the reference environment: ``scripts/reference_env.sh``, then ``<venv>/bin/python -m pytest tests/reference``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

core_algos = pytest.importorskip(
    "verl.trainer.ppo.core_algos",
    reason="verl is not installed: run in the reference environment: scripts/reference_env.sh, then "
    "<venv>/bin/python -m pytest tests/reference (default venv .ci/cache/verl-ref)",
)
from verl.workers.config import ActorConfig, PolicyLossConfig  # noqa: E402

from mmgrpo.algos import group_advantages, policy_loss  # noqa: E402
from mmgrpo.algos.advantages import ADVANTAGE_ESTIMATORS  # noqa: E402
from mmgrpo.algos.surrogates import SURROGATES  # noqa: E402
from tests.reference.batches import (  # noqa: E402
    F64, FULL_ROWS, LENGTHS, MAX_LEN, SEEDS, TOLERANCE, WIDTH, Batch, make_batch,
)

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
SELECTION_SEED = 1234  # torch's global generator before each side's call (clip_cov picks tokens with randperm)


@dataclass(frozen=True)
class LossCase:
    """One mmgrpo surrogate and the verl policy loss it must equal, with each side's settings."""

    id: str
    mmgrpo: str
    verl: str
    eps_low: float = 0.2
    eps_high: float = 0.28
    dual_clip: float | None = None
    options: dict[str, float] = field(default_factory=dict)  # mmgrpo's surrogate_options
    verl_actor: dict[str, Any] = field(default_factory=dict)  # verl ActorConfig fields
    verl_policy_loss: dict[str, Any] = field(default_factory=dict)  # verl PolicyLossConfig fields
    aggregations: tuple[str, ...] = AGGREGATIONS


NO_DUAL_CLIP = 1e12  # verl always applies clip_ratio_c; one no ratio reaches is mmgrpo's dual_clip=None
LOSS_CASES = (
    LossCase("vanilla-dual-clip", "vanilla", "vanilla", dual_clip=3.0, verl_actor={"clip_ratio_c": 3.0}),
    LossCase("vanilla", "vanilla", "vanilla", verl_actor={"clip_ratio_c": NO_DUAL_CLIP}),
    LossCase("gspo", "gspo", "gspo"),
    LossCase("gspo_token", "gspo_token", "gspo"),  # verl's gspo is the token form (sg[s_i] * pi / sg[pi])
    LossCase("cispo", "cispo", "cispo"),
    # verl's geo_mean and sapo ignore loss_agg_mode: a mean over sequences of their token means
    LossCase("geo_mean", "geo_mean", "geo_mean", eps_low=0.3, eps_high=0.4, aggregations=("seq-mean-token-mean",)),
    LossCase("gpg", "gpg", "gpg"),
    LossCase("sapo", "sapo", "sapo", options={"tau_pos": 0.9, "tau_neg": 1.3},
             verl_actor={"tau_pos": 0.9, "tau_neg": 1.3}, aggregations=("seq-mean-token-mean",)),
    # thresholds on the probability difference (TV) or the binary KL; dppo_ratio_cap = verl's clip_ratio_c
    LossCase("dppo_tv", "dppo_tv", "dppo_tv", eps_low=0.15, eps_high=0.25, options={"dppo_ratio_cap": 2.0},
             verl_actor={"clip_ratio_c": 2.0}),
    LossCase("dppo_tv-default-cap", "dppo_tv", "dppo_tv", eps_low=0.15, eps_high=0.25,
             verl_actor={"clip_ratio_c": 20.0}),
    LossCase("dppo_kl", "dppo_kl", "dppo_kl", eps_low=0.05, eps_high=0.08, options={"dppo_ratio_cap": 2.0},
             verl_actor={"clip_ratio_c": 2.0}),
    LossCase("dro", "dro", "dro", options={"dro_beta": 0.5}, verl_policy_loss={"dro_beta": 0.5}),
    # a fraction and bounds wide enough that several tokens (not all) are picked in every batch
    LossCase("clip_cov", "clip_cov", "clip_cov",
             options={"clip_cov_ratio": 0.2, "clip_cov_lb": 0.0, "clip_cov_ub": 5.0},
             verl_policy_loss={"clip_cov_ratio": 0.2, "clip_cov_lb": 0.0, "clip_cov_ub": 5.0}),
    LossCase("kl_cov", "kl_cov", "kl_cov", options={"kl_cov_ratio": 0.2, "kl_cov_coef": 0.5},
             verl_policy_loss={"kl_cov_ratio": 0.2, "ppo_kl_coef": 0.5}),
)


def needs_surrogate(name: str) -> None:
    """Skip while mmgrpo has no surrogate of that name (some are being added for #32)."""
    if name not in SURROGATES:
        pytest.skip(f"policy loss {name!r}: not registered yet in mmgrpo.algos.surrogates.SURROGATES")


def verl_config(case: LossCase) -> ActorConfig:
    """verl's actor config for one process (dp_size 1; token and sequence counts taken from the mask)."""
    return ActorConfig(
        strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
        clip_ratio=case.eps_low, clip_ratio_low=case.eps_low, clip_ratio_high=case.eps_high,
        policy_loss=PolicyLossConfig(loss_mode=case.verl, **case.verl_policy_loss),
        loss_scale_factor=MAX_LEN, global_batch_info={"dp_size": 1, "loss_scale_factor": MAX_LEN},
        **case.verl_actor,
    )


def mmgrpo_loss(case: LossCase, batch: Batch, agg: str) -> tuple[Tensor, Tensor]:
    """mmgrpo's loss and its gradient with respect to ``logp``."""
    logp = batch.logp.clone().requires_grad_()
    torch.manual_seed(SELECTION_SEED)
    loss, _ = policy_loss(
        logp, batch.old_logp, batch.advantages, batch.mask, eps_low=case.eps_low, eps_high=case.eps_high,
        dual_clip=case.dual_clip, agg=agg, max_len=MAX_LEN, surrogate=case.mmgrpo, surrogate_options=case.options,
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad


def verl_loss(case: LossCase, batch: Batch, agg: str) -> tuple[Tensor, Tensor, dict[str, Any]]:
    """verl's loss, its gradient with respect to ``log_prob``, and its metrics."""
    logp = batch.logp.clone().requires_grad_()
    torch.manual_seed(SELECTION_SEED)
    loss, metrics = core_algos.get_policy_loss_fn(case.verl)(
        old_log_prob=batch.old_logp, log_prob=logp, advantages=batch.token_advantages, response_mask=batch.mask,
        loss_agg_mode=agg, config=verl_config(case), rollout_is_weights=None,
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, metrics


def loss_params() -> list[Any]:
    """Every (case, aggregation, seed) verl defines."""
    return [pytest.param(case, agg, seed, id=f"{case.id}-{agg}-seed{seed}")
            for case in LOSS_CASES for agg in case.aggregations for seed in SEEDS]


@pytest.mark.parametrize(("case", "agg", "seed"), loss_params())
def test_policy_loss_equals_verl(case: LossCase, agg: str, seed: int) -> None:
    """Loss and gradient equal verl's, on a batch with uneven lengths (geo_mean: no fully masked row)."""
    needs_surrogate(case.mmgrpo)
    batch = make_batch(seed, FULL_ROWS if case.mmgrpo == "geo_mean" else LENGTHS)
    expected, expected_grad, metrics = verl_loss(case, batch, agg)
    loss, grad = mmgrpo_loss(case, batch, agg)
    if case.mmgrpo == "clip_cov":
        assert 0 < metrics["actor/pg_clipfrac"] < 0.2, "the test batch must make clip_cov pick some tokens"
    torch.testing.assert_close(loss, expected, **TOLERANCE)
    torch.testing.assert_close(grad, expected_grad, **TOLERANCE)
    assert grad[batch.mask == 0].abs().max() == 0


def test_batches_take_every_clip_branch() -> None:
    """The random batches leave the clip range on both sides with both signs, and pass the dual clip (3)."""
    for seed in SEEDS:
        batch = make_batch(seed)
        ratio = (batch.logp - batch.old_logp).exp()[batch.mask > 0]
        sign = batch.advantages[:, None].expand_as(batch.mask)[batch.mask > 0]
        assert ((ratio > 1.28) & (sign > 0)).any() and ((ratio < 0.8) & (sign < 0)).any()
        assert ((ratio > 1.28) & (sign < 0)).any() and ((ratio < 0.8) & (sign > 0)).any()
        assert ((ratio > 3.0) & (sign < 0)).any(), "no token reaches the dual clip"


def test_geo_mean_counts_a_fully_masked_row_by_design() -> None:
    """verl's geo_mean averages over every row, an empty one as 0; mmgrpo's over the rows with tokens."""
    needs_surrogate("geo_mean")
    case = next(case for case in LOSS_CASES if case.id == "geo_mean")
    batch = make_batch(0)
    expected, expected_grad, _ = verl_loss(case, batch, "seq-mean-token-mean")
    loss, grad = mmgrpo_loss(case, batch, "seq-mean-token-mean")
    share = len(FULL_ROWS) / len(LENGTHS)
    torch.testing.assert_close(loss * share, expected, **TOLERANCE)
    torch.testing.assert_close(grad * share, expected_grad, **TOLERANCE)


# Advantage estimators ------------------------------------------------------------------------------------------

GROUP_SIZES = (4, 2, 5, 3, 6, 2, 3)
EQUAL_GROUP = 5  # the index of a group whose rewards are all equal (advantage 0 on both sides)
EPS = 1e-6  # verl's default epsilon, passed to both


@dataclass(frozen=True)
class EstimatorCase:
    """One mmgrpo estimator (with its group_advantages options) and the verl estimator it must equal."""

    id: str
    mmgrpo: str
    verl: str
    options: dict[str, Any] = field(default_factory=dict)
    verl_options: dict[str, Any] = field(default_factory=dict)


ESTIMATOR_CASES = (
    EstimatorCase("grpo", "grpo", "grpo", verl_options={"norm_adv_by_std_in_grpo": True}),
    EstimatorCase("grpo-scale_std-off", "grpo", "grpo", {"scale_std": False}, {"norm_adv_by_std_in_grpo": False}),
    EstimatorCase("dr_grpo", "dr_grpo", "grpo", verl_options={"norm_adv_by_std_in_grpo": False}),
    EstimatorCase("rloo", "rloo", "rloo"),
    EstimatorCase("reinforce_pp", "reinforce_pp", "reinforce_plus_plus_baseline"),
    EstimatorCase("grpo_passk", "grpo_passk", "grpo_passk", verl_options={"config": {"norm_adv_by_std_in_grpo": True}}),
    EstimatorCase("grpo_passk-scale_std-off", "grpo_passk", "grpo_passk", {"scale_std": False},
                  {"config": {"norm_adv_by_std_in_grpo": False}}),
    EstimatorCase("gpg", "gpg", "gpg"),
    EstimatorCase("opo", "opo", "opo"),
)


def make_rewards(seed: int, sizes: Sequence[int] = GROUP_SIZES) -> Tensor:
    """Continuous rewards, 0/1 rewards in the second group, and one group of equal rewards."""
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randn(sum(sizes), generator=generator, dtype=F64)
    starts = np.cumsum((0, *sizes))
    if len(sizes) > 1:
        rewards[starts[1]:starts[2]] = torch.tensor([1.0, 0.0] * sizes[1], dtype=F64)[: sizes[1]]
    if len(sizes) > EQUAL_GROUP:
        rewards[starts[EQUAL_GROUP]:starts[EQUAL_GROUP + 1]] = 0.7
    return rewards


def response_mask(seed: int, n: int, uneven: bool) -> Tensor:
    """``[N, T]``: random lengths from 1 to T, or one token per completion."""
    lengths = torch.randint(1, WIDTH + 1, (n,), generator=torch.Generator().manual_seed(seed)) if uneven else [1] * n
    return (torch.arange(WIDTH)[None, :] < torch.as_tensor(lengths)[:, None]).to(F64)


def verl_advantages(name: str, rewards: Tensor, sizes: Sequence[int], mask: Tensor, **options: Any) -> Tensor:
    """verl's ``[N, T]`` advantages: the reward on each completion's last token, groups named by uid strings."""
    index = np.array([f"prompt-{group}" for group, size in enumerate(sizes) for _ in range(size)], dtype=object)
    token_rewards = torch.zeros_like(mask)
    last = mask.sum(dim=-1).long() - 1
    token_rewards[torch.arange(len(rewards)), last] = rewards
    advantages, _ = core_algos.get_adv_estimator_fn(name)(
        token_level_rewards=token_rewards, response_mask=mask, index=index, epsilon=EPS, **options
    )
    return advantages


def needs_estimator(name: str) -> None:
    """Skip while mmgrpo has no estimator of that name (some are being added for #32)."""
    if name not in ADVANTAGE_ESTIMATORS:
        pytest.skip(f"advantage estimator {name!r}: not registered yet in mmgrpo.algos.ADVANTAGE_ESTIMATORS")


def estimator_params() -> list[Any]:
    """Every (case, seed, layout)."""
    params = []
    for case in ESTIMATOR_CASES:
        for seed in SEEDS:
            for uneven in (True, False):
                layout = "uneven-lengths" if uneven else "one-token-each"
                params.append(pytest.param(case, seed, uneven, id=f"{case.id}-{layout}-seed{seed}"))
    return params


@pytest.mark.parametrize(("case", "seed", "uneven"), estimator_params())
def test_advantages_equal_verl(case: EstimatorCase, seed: int, uneven: bool) -> None:
    """Advantages equal verl's on every completion token, for groups of sizes 2 to 6 and an all-equal group."""
    needs_estimator(case.mmgrpo)
    rewards = make_rewards(seed)
    mask = response_mask(seed, len(rewards), uneven)
    expected = verl_advantages(case.verl, rewards, GROUP_SIZES, mask, **case.verl_options)
    advantages = group_advantages(rewards, list(GROUP_SIZES), estimator=case.mmgrpo, lengths=mask.sum(dim=-1),
                                  **({"eps": EPS} | case.options))
    assert advantages.dtype == F64
    torch.testing.assert_close(advantages[:, None] * mask, expected, **TOLERANCE)
    start = sum(GROUP_SIZES[:EQUAL_GROUP])
    if case.mmgrpo != "reinforce_pp":  # its batch whitening moves the all-equal group off 0 on both sides
        assert advantages[start:start + GROUP_SIZES[EQUAL_GROUP]].abs().max() == 0


@pytest.mark.parametrize(("name", "verl", "verl_options", "singleton"), [
    ("grpo", "grpo", {"norm_adv_by_std_in_grpo": True}, lambda r: r / (1 + EPS)),  # (r - 0) / (1 + eps)
    ("dr_grpo", "grpo", {"norm_adv_by_std_in_grpo": False}, lambda r: r),
    ("rloo", "rloo", {}, lambda r: r),
    ("opo", "opo", {}, lambda r: r),
    ("gpg", "gpg", {}, None),
], ids=["grpo", "dr_grpo", "rloo", "opo", "gpg"])
def test_group_of_one_by_design(name: str, verl: str, verl_options: dict[str, Any], singleton: Any) -> None:
    """A group of one: mmgrpo's advantage is 0, verl's keeps the reward; the other groups are equal."""
    sizes = (3, 1, 4)
    rewards = make_rewards(2, sizes)
    mask = response_mask(2, len(rewards), uneven=True)
    expected = verl_advantages(verl, rewards, sizes, mask, **verl_options)[:, :1].squeeze(-1)  # every row has t=0
    advantages = group_advantages(rewards, list(sizes), estimator=name, eps=EPS, lengths=mask.sum(dim=-1))
    assert advantages[3] == 0
    if singleton is not None:  # gpg: verl's alpha times the reward
        torch.testing.assert_close(expected[3], singleton(rewards[3]), **TOLERANCE)
    others = torch.arange(len(rewards)) != 3
    torch.testing.assert_close(advantages[others], expected[others], **TOLERANCE)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scale_std", [True, False])
def test_gdpo_equals_verl(seed: int, scale_std: bool) -> None:
    """Two rewards of different ranges, weighted 1 and 0.3, normalised apart; verl computes them in float32 (each
    reward is a float32 score on the last token), hence the float32 tolerance."""
    rewards = make_rewards(seed)
    second = 10 * make_rewards(seed + 7).round()
    components, weights = torch.stack([rewards, second], dim=1), torch.tensor([1.0, 0.3], dtype=F64)
    mask = response_mask(seed, len(rewards), uneven=True)
    index = np.array([f"prompt-{group}" for group, size in enumerate(GROUP_SIZES) for _ in range(size)], dtype=object)
    prompt = torch.ones(len(rewards), 3, dtype=torch.long)
    expected, _ = core_algos.get_adv_estimator_fn("gdpo")(
        token_level_rewards=torch.zeros_like(mask), response_mask=mask, index=index, epsilon=EPS,
        norm_adv_by_std_in_grpo=scale_std, config={"gdpo_reward_keys": ["a", "b"], "gdpo_reward_weights": [1.0, 0.3]},
        non_tensor_batch={"a": components[:, 0].numpy(), "b": components[:, 1].numpy()},
        batch={"prompts": prompt, "attention_mask": torch.cat([prompt, mask.long()], dim=1)},
    )
    advantages = group_advantages(components @ weights, list(GROUP_SIZES), estimator="gdpo", eps=EPS,
                                  scale_std=scale_std, lengths=mask.sum(dim=-1), components=components,
                                  component_weights=weights.expand_as(components))
    torch.testing.assert_close(advantages[:, None] * mask, expected.to(F64), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_remax_equals_verl(seed: int) -> None:
    """verl takes each completion's greedy baseline; mmgrpo one per group (every completion of a group shares its
    prompt's greedy completion)."""
    rewards = make_rewards(seed)
    mask = response_mask(seed, len(rewards), uneven=True)
    greedy = torch.randn(len(GROUP_SIZES), generator=torch.Generator().manual_seed(seed + 3), dtype=F64)
    per_completion = torch.repeat_interleave(greedy, torch.tensor(GROUP_SIZES))
    token_rewards = torch.zeros_like(mask)
    token_rewards[torch.arange(len(rewards)), mask.sum(dim=-1).long() - 1] = rewards
    expected, _ = core_algos.get_adv_estimator_fn("remax")(
        token_level_rewards=token_rewards, reward_baselines=per_completion, response_mask=mask)
    advantages = group_advantages(rewards, list(GROUP_SIZES), estimator="remax", baselines=greedy)
    torch.testing.assert_close(advantages[:, None] * mask, expected, **TOLERANCE)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("zero_tail", [True, False])
def test_optimal_token_baseline_equals_verl(seed: int, zero_tail: bool) -> None:
    """Per-token baselines from the path variances; groups of one left out (mmgrpo gives them 0, verl the reward)."""
    from mmgrpo.algos.advantages import Groups
    from mmgrpo.algos.token_baseline import optimal_token_baseline

    sizes = [size for size in GROUP_SIZES if size > 1]
    rewards = make_rewards(seed, sizes)
    mask = response_mask(seed, len(rewards), uneven=True)
    generator = torch.Generator().manual_seed(seed + 11)
    logp = -torch.rand(mask.shape, generator=generator, dtype=F64) * 3 * mask
    sum_pi_squared = (logp.exp().square() + torch.rand(mask.shape, generator=generator, dtype=F64) * 0.3) * mask
    index = np.array([f"prompt-{group}" for group, size in enumerate(sizes) for _ in range(size)], dtype=object)
    token_rewards = torch.zeros_like(mask)
    token_rewards[torch.arange(len(rewards)), mask.sum(dim=-1).long() - 1] = rewards
    expected, _ = core_algos.get_adv_estimator_fn("optimal_token_baseline")(
        token_level_rewards=token_rewards, response_mask=mask, index=index, old_log_probs=logp,
        sum_pi_squared=sum_pi_squared, handle_zero_tail=zero_tail)
    groups = Groups.from_sizes(sizes, len(rewards), rewards.device)
    advantages = optimal_token_baseline(rewards, groups, logp, sum_pi_squared, mask, zero_tail=zero_tail)
    torch.testing.assert_close(advantages, expected, **TOLERANCE)


@pytest.mark.parametrize("seed", SEEDS)
def test_optimal_token_baseline_with_importance_weights_equals_verl(seed: int) -> None:
    """algo.is_correction's truncated ratios square into the path variances, as verl's rollout IS weights."""
    from mmgrpo.algos import ISCorrection, importance_weights
    from mmgrpo.algos.advantages import Groups
    from mmgrpo.algos.token_baseline import optimal_token_baseline

    sizes = [size for size in GROUP_SIZES if size > 1]
    rewards = make_rewards(seed, sizes)
    mask = response_mask(seed, len(rewards), uneven=True)
    generator = torch.Generator().manual_seed(seed + 13)
    logp = -torch.rand(mask.shape, generator=generator, dtype=F64) * 3 * mask
    sampler = logp + torch.randn(mask.shape, generator=generator, dtype=F64) * 0.5 * mask
    sum_pi_squared = (logp.exp().square() + torch.rand(mask.shape, generator=generator, dtype=F64) * 0.3) * mask
    weights, _, _ = importance_weights(logp, sampler, mask, ISCorrection("tis", "token", 2.0))
    index = np.array([f"prompt-{group}" for group, size in enumerate(sizes) for _ in range(size)], dtype=object)
    token_rewards = torch.zeros_like(mask)
    token_rewards[torch.arange(len(rewards)), mask.sum(dim=-1).long() - 1] = rewards
    expected, _ = core_algos.get_adv_estimator_fn("optimal_token_baseline")(
        token_level_rewards=token_rewards, response_mask=mask, index=index, old_log_probs=logp,
        sum_pi_squared=sum_pi_squared, rollout_is_weights=weights.double())
    groups = Groups.from_sizes(sizes, len(rewards), rewards.device)
    advantages = optimal_token_baseline(rewards, groups, logp, sum_pi_squared, mask, importance_weights=weights)
    assert bool((weights[mask.bool()] != 1).any())
    torch.testing.assert_close(advantages, expected, atol=1e-5, rtol=1e-5)  # the weights are float32
