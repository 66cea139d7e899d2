"""group_advantages: hand-computed values per estimator, variable group sizes, invariants."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrpo.algos import ADVANTAGE_ESTIMATORS, group_advantages
from mmgrpo.algos.token_baseline import TOKEN_LEVEL_ESTIMATORS
from mmgrpo.registry import RegistryError

FAST = settings(max_examples=50, deadline=None)
OUTCOME_ESTIMATORS = [name for name in ADVANTAGE_ESTIMATORS.names() if name not in TOKEN_LEVEL_ESTIMATORS]
ONE_WINNER = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0])  # two groups of 4


def close(actual: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-6, rtol=1e-6)


def estimate(rewards: torch.Tensor, sizes, estimator: str, **kwargs) -> torch.Tensor:
    """group_advantages with what any estimator may need: token counts, and the reward as its only component."""
    n = len(rewards)
    return group_advantages(rewards, sizes, estimator=estimator, lengths=torch.arange(n) % 5 + 1,
                            components=rewards[:, None], component_weights=torch.ones(n, 1),
                            baselines=rewards[_group_starts(sizes, n)], **kwargs)


def _group_starts(sizes, n: int) -> torch.Tensor:
    """The index of each group's first reward (its stand-in greedy reward for remax)."""
    sizes = torch.as_tensor(sizes)
    sizes = sizes.repeat(n // int(sizes)) if sizes.dim() == 0 else sizes
    return torch.cumsum(sizes, 0) - sizes


def test_registry_holds_the_ten_estimators():
    assert ADVANTAGE_ESTIMATORS.names() == ["dr_grpo", "gdpo", "gpg", "grpo", "grpo_passk", "opo",
                                            "optimal_token_baseline", "reinforce_pp", "remax", "rloo"]


def test_grpo_divides_by_the_unbiased_group_std():
    # group 1: mean 1/4, unbiased std sqrt((9/16 + 3/16) / 3) = 1/2 (biased would be 0.433)
    close(group_advantages(ONE_WINNER, 4, eps=0.0), [1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0])


def test_grpo_eps_is_added_to_the_std():
    eps = 0.1
    expected = [0.75 / (0.5 + eps)] + [-0.25 / (0.5 + eps)] * 3 + [0.0] * 4
    close(group_advantages(ONE_WINNER, 4, eps=eps), expected)


def test_grpo_batch_scale_divides_by_the_std_of_all_rewards():
    rewards = torch.tensor([0.0, 2.0, 4.0, 6.0])  # groups [0, 2], [4, 6]; batch mean 3
    batch_std = math.sqrt((9 + 1 + 1 + 9) / 3)  # unbiased over the batch
    close(group_advantages(rewards, 2, scale="batch", eps=0.0), [-1 / batch_std, 1 / batch_std] * 2)
    group_std = math.sqrt(2.0)
    close(group_advantages(rewards, 2, scale="group", eps=0.0), [-1 / group_std, 1 / group_std] * 2)


@pytest.mark.parametrize("call", [{"estimator": "dr_grpo"}, {"estimator": "grpo", "scale_std": False}])
def test_dr_grpo_only_centres(call):
    close(group_advantages(ONE_WINNER, 4, **call), [0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0])


def test_rloo_subtracts_the_mean_of_the_other_rewards():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 3.0, 1.0])
    close(group_advantages(rewards, [4, 2], estimator="rloo"), [1.0, -1 / 3, -1 / 3, -1 / 3, 2.0, -2.0])


def test_rloo_of_a_single_completion_is_zero():
    close(group_advantages(torch.tensor([5.0, 1.0, 2.0]), [1, 2], estimator="rloo"), [0.0, -1.0, 1.0])


def test_reinforce_pp_whitens_group_centred_rewards_over_the_batch():
    rewards = torch.tensor([1.0, 0.0, 3.0, 3.0])  # centred [0.5, -0.5, 0, 0], batch mean 0
    batch_std = math.sqrt((0.25 + 0.25) / 3)
    out = group_advantages(rewards, 2, estimator="reinforce_pp", eps=0.0)
    close(out, [0.5 / batch_std, -0.5 / batch_std, 0.0, 0.0])


def test_variable_group_sizes_match_per_group_computation():
    rewards = torch.tensor([5.0, 1.0, 0.0, 0.0, 2.0, 4.0])
    sizes = [1, 3, 2]
    for estimator in ("grpo", "dr_grpo", "rloo"):
        together = group_advantages(rewards, sizes, estimator=estimator)
        alone = torch.cat([group_advantages(g, len(g), estimator=estimator) for g in rewards.split(sizes)])
        torch.testing.assert_close(together, alone)
    root3, root2 = math.sqrt(3), math.sqrt(2)  # group stds: [1, 0, 0] -> 1/root3, [2, 4] -> root2
    expected = [0.0, 2 / root3, -1 / root3, -1 / root3, -1 / root2, 1 / root2]
    close(group_advantages(rewards, torch.tensor(sizes), eps=0.0), expected)


def test_large_equal_rewards_give_exactly_zero():
    rewards = torch.full((6,), 123456.7)  # float32 rounding would leak into a naive mean
    for estimator in OUTCOME_ESTIMATORS:
        assert torch.equal(estimate(rewards, 3, estimator), torch.zeros(6))


@pytest.mark.parametrize(
    "rewards, group_size, kwargs, message",
    [
        (torch.zeros(6), 4, {}, "does not divide"),
        (torch.zeros(6), [2, 3], {}, "sum to 5"),
        (torch.zeros(3), [3, 0], {}, ">= 1"),
        (torch.tensor([0.0, float("nan")]), 2, {}, "positions \\[1\\]"),
        (torch.zeros(2, 2), 2, {}, "1-D"),
        (torch.zeros(2), 2, {"scale": "global"}, "'group' or 'batch'"),
    ],
)
def test_bad_input_is_named(rewards, group_size, kwargs, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(rewards, group_size, **kwargs)


def test_unknown_estimator_lists_known_ones():
    with pytest.raises(RegistryError, match="rloo"):
        group_advantages(torch.zeros(2), 2, estimator="rlooo")


finite_rewards = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=32)


@st.composite
def grouped_rewards(draw):
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
    rewards = draw(st.lists(finite_rewards, min_size=sum(sizes), max_size=sum(sizes)))
    return torch.tensor(rewards), sizes


@FAST
@given(grouped_rewards(), st.sampled_from(["grpo", "dr_grpo"]))
def test_grpo_groups_sum_to_zero(data, estimator):
    rewards, sizes = data
    advantages = group_advantages(rewards.double(), sizes, estimator=estimator)
    for group in advantages.split(sizes):
        assert abs(group.sum().item()) <= 1e-9 * group.abs().sum().item() + 1e-12


@FAST
@given(grouped_rewards(), st.sampled_from(OUTCOME_ESTIMATORS), st.sampled_from(["group", "batch"]))
def test_finite_rewards_give_finite_advantages(data, estimator, scale):
    rewards, sizes = data
    assert torch.isfinite(estimate(rewards, sizes, estimator, scale=scale)).all()


@FAST
@given(
    st.lists(st.tuples(finite_rewards, st.integers(1, 5)), min_size=1, max_size=5),
    st.sampled_from(OUTCOME_ESTIMATORS),
)
def test_all_equal_groups_and_singletons_give_zero(groups, estimator):
    rewards = torch.tensor([value for value, size in groups for _ in range(size)])
    sizes = [size for _, size in groups]
    assert torch.equal(estimate(rewards, sizes, estimator), torch.zeros(len(rewards)))
