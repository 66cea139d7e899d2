"""Pass@k, OPO, GPG and GDPO advantages and REINFORCE++'s token-weighted whitening, against values written out by
hand, on groups of different sizes."""

import math

import pytest
import torch

from mmgrpo.algos import group_advantages

# Three groups: [1, 0, 0.5, 0], [2, 2, 2] (all equal), [0, 1].
REWARDS = torch.tensor([1.0, 0.0, 0.5, 0.0, 2.0, 2.0, 2.0, 0.0, 1.0], dtype=torch.float64)
SIZES = [4, 3, 2]
LENGTHS = torch.tensor([1, 3, 2, 2, 5, 5, 5, 1, 3])


def close(actual: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-9, rtol=1e-9)


def _std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


@pytest.mark.parametrize("scale_std", [True, False])
def test_grpo_passk_rewards_only_each_groups_best_by_its_margin_over_the_runner_up(scale_std):
    """Group 1: best 1 over 0.5; group 2: a tie, margin 0; group 3: 1 over 0. Divided by the group std or not."""
    out = group_advantages(REWARDS, SIZES, estimator="grpo_passk", eps=0.0, scale_std=scale_std)
    first, last = (0.5 / _std([1, 0, 0.5, 0]), 1 / _std([0, 1])) if scale_std else (0.5, 1.0)
    close(out, [first, 0, 0, 0, 0, 0, 0, 0, last])
    flipped = group_advantages(-REWARDS, SIZES, estimator="grpo_passk", eps=0.0, scale_std=scale_std)
    assert int(flipped.argmax()) != 0 and float(flipped[7]) > 0  # the sign decides who is best
    alone = group_advantages(REWARDS, [4, 3, 1, 1], estimator="grpo_passk", eps=0.0, scale_std=scale_std)
    close(alone, [first, 0, 0, 0, 0, 0, 0, 0, 0])  # a group of one has no runner-up


def test_opo_subtracts_the_length_weighted_group_mean():
    """Group 1: (1 x 1 + 3 x 0 + 2 x 0.5 + 2 x 0) / 8 = 0.25; group 3: (1 x 0 + 3 x 1) / 4 = 0.75."""
    close(group_advantages(REWARDS, SIZES, estimator="opo", lengths=LENGTHS),
          [0.75, -0.25, 0.25, -0.25, 0, 0, 0, -0.75, 0.25])
    equal_lengths = group_advantages(REWARDS, SIZES, estimator="opo", lengths=torch.full((9,), 4))
    torch.testing.assert_close(equal_lengths, group_advantages(REWARDS, SIZES, estimator="dr_grpo"))
    with pytest.raises(ValueError, match="pass lengths"):
        group_advantages(REWARDS, SIZES, estimator="opo")


def test_gpg_scales_the_centred_reward_by_the_batch_over_its_rewarded_count():
    """6 of 9 rewards are non-zero: alpha = 1.5."""
    centred = [0.625, -0.375, 0.125, -0.375, 0, 0, 0, -0.5, 0.5]
    close(group_advantages(REWARDS, SIZES, estimator="gpg"), [1.5 * c for c in centred])
    nothing = group_advantages(torch.zeros(4, dtype=torch.float64), 2, estimator="gpg")
    close(nothing, [0.0] * 4)


def _token_whiten(values: list[float], lengths: list[int]) -> list[float]:
    tokens = sum(lengths)
    mean = sum(v * n for v, n in zip(values, lengths)) / tokens
    var = sum(n * (v - mean) ** 2 for v, n in zip(values, lengths)) / (tokens - 1)
    return [(v - mean) / math.sqrt(var + 1e-8) for v in values]


def test_reinforce_pp_whitens_over_tokens_each_completion_weighing_its_length():
    centred = [0.625, -0.375, 0.125, -0.375, 0, 0, 0, -0.5, 0.5]
    out = group_advantages(REWARDS, SIZES, estimator="reinforce_pp", lengths=LENGTHS)
    close(out, _token_whiten(centred, LENGTHS.tolist()))
    close(group_advantages(REWARDS, SIZES, estimator="reinforce_pp"), _token_whiten(centred, [1] * 9))


def test_gdpo_normalises_each_reward_in_its_group_before_the_weighted_sum():
    """A format reward in {0, 1} and an accuracy reward in {0, 10}: GRPO on their sum lets the accuracy decide;
    GDPO gives each its own unit, then whitens the sum over tokens."""
    fmt = torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.float64)
    acc = torch.tensor([0, 10, 10, 0, 0, 10], dtype=torch.float64)
    weights = torch.tensor([[1.0, 0.5]] * 6, dtype=torch.float64)
    lengths = torch.tensor([2, 4, 3, 1, 5, 2])
    out = group_advantages(fmt + 0.5 * acc, 3, estimator="gdpo", eps=0.0, lengths=lengths,
                           components=torch.stack([fmt, acc], dim=1), component_weights=weights)
    per_reward = []
    for values in (fmt.tolist(), acc.tolist()):
        normalised = []
        for group in (values[:3], values[3:]):
            mean, std = sum(group) / 3, _std(group)
            normalised += [(v - mean) / std for v in group]
        per_reward.append(normalised)
    summed = [f + 0.5 * a for f, a in zip(*per_reward)]
    close(out, _token_whiten(summed, lengths.tolist()))
    with pytest.raises(ValueError, match="components"):
        group_advantages(fmt, 3, estimator="gdpo")
    with pytest.raises(ValueError, match=r"\[N, K\]"):
        group_advantages(fmt, 3, estimator="gdpo", components=fmt[:, None], component_weights=weights)


def test_remax_subtracts_each_groups_greedy_reward_or_its_mean_without_one():
    greedy = torch.tensor([0.5, 1.0, math.nan], dtype=torch.float64)
    close(group_advantages(REWARDS, SIZES, estimator="remax", baselines=greedy),
          [0.5, -0.5, 0, -0.5, 1, 1, 1, -0.5, 0.5])
    with pytest.raises(ValueError, match="one greedy-completion reward per group"):
        group_advantages(REWARDS, SIZES, estimator="remax", baselines=greedy[:2])


def test_optimal_token_baseline_by_hand_and_a_group_of_one_gets_zero():
    """Group [r=1 over 2 tokens, r=0 over 1 token] and a group of one. w = 1 - 2 pi + S per token, W its running
    sum; B_t = sum_i r_i W_it / sum_i W_it over the rows still running; past the runner-up's length the single
    longest row's baseline is 0 (the zero tail)."""
    from mmgrpo.algos.advantages import Groups
    from mmgrpo.algos.token_baseline import optimal_token_baseline

    logp = torch.log(torch.tensor([[0.5, 0.25], [0.8, 1.0], [0.5, 1.0]], dtype=torch.float64))
    spp = torch.tensor([[0.5, 0.3], [0.7, 0.0], [0.5, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0], [1, 0]])
    rewards = torch.tensor([1.0, 0.0, 3.0], dtype=torch.float64)
    groups = Groups.from_sizes([2, 1], 3, rewards.device)
    w00, w01, w10 = 1 - 1.0 + 0.5, 1 - 0.5 + 0.3, 1 - 1.6 + 0.7  # 0.5, 0.8, 0.1
    b0 = (1.0 * w00 + 0.0 * w10) / (w00 + w10 + 1e-8)
    out = optimal_token_baseline(rewards, groups, logp, spp, mask)
    close(out.flatten(), [1 - b0, 1.0, -b0, 0.0, 0.0, 0.0])  # row 0, t=1: past row 1's length, baseline 0
    kept = optimal_token_baseline(rewards, groups, logp, spp, mask, zero_tail=False)
    b1 = 1.0 * (w00 + w01) / (w00 + w01 + 1e-8)
    close(kept.flatten(), [1 - b0, 1 - b1, -b0, 0.0, 0.0, 0.0])
