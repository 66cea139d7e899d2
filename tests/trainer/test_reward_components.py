"""What GDPO normalises: each completion's separate rewards and their weights, from a step's groups of mixed
tasks, with failed or inapplicable rewards and DAPO's overlong penalty; and the token counts of the completions."""

import math

import pytest
import torch

from mmgrpo.algos import group_advantages
from mmgrpo.trainer.rollouts import Group, Rollouts
from mmgrpo.types import Completion, Sample

WEIGHTS = {"count": {"accuracy": 1.0, "format": 0.5}, "caption": {"similarity": 2.0, "format": 0.25}}


def _rollouts() -> Rollouts:
    count = Group(Sample("a", "count", []), [Completion("", [1, 2]), Completion("", [1])],
                  rewards=[1.5 - 0.2, 0.0], components={"accuracy": [1.0, 0.0], "format": [1.0, None]})  # -0.2: penalty
    caption = Group(Sample("b", "caption", []), [Completion("", [1, 2, 3])] * 2,
                    rewards=[2 * 0.3 + 0.25, 2 * 0.9], components={"similarity": [0.3, 0.9], "format": [1.0, 0.0]})
    return Rollouts(groups=[count, caption])


def test_the_weighted_components_and_the_overlong_penalty_sum_to_each_total():
    components, weights = _rollouts().reward_components(WEIGHTS, penalties=torch.tensor([-0.2, 0.0, 0.0, 0.0]))
    # columns: accuracy, format, similarity, then the overlong penalty (the first completion's -0.2)
    torch.testing.assert_close(components, torch.tensor([
        [1.0, 1.0, 0.0, -0.2], [0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.3, 0.0], [0.0, 0.0, 0.9, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(weights, torch.tensor([
        [1.0, 0.5, 0.0, 1.0], [1.0, 0.5, 0.0, 1.0], [0.0, 0.25, 2.0, 1.0], [0.0, 0.25, 2.0, 1.0]],
        dtype=torch.float64))
    totals = torch.tensor([r for group in _rollouts().groups for r in group.rewards], dtype=torch.float64)
    torch.testing.assert_close((components * weights).sum(dim=1), totals)
    assert _rollouts().lengths().tolist() == [2, 1, 3, 3]
    assert _rollouts().reward_components(WEIGHTS)[0].shape == (4, 3)  # no penalty column without the penalty


def test_gdpo_sees_the_rewards_not_the_float32_rounding_of_their_total():
    """Totals are float32: a component made of what they lost in rounding, normalised in its group, was ~1e-8 /
    eps of noise in the advantages (1.3e-4 at eps 1e-4 here)."""
    accuracy, fmt = [1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]
    totals = torch.tensor([a + 0.1 * f for a, f in zip(accuracy, fmt)], dtype=torch.float32).tolist()
    group = Group(Sample("a", "count", []), [Completion("", [1, 2])] * 4, rewards=totals,
                  components={"accuracy": accuracy, "format": fmt})
    rollouts = Rollouts(groups=[group])
    components, weights = rollouts.reward_components({"count": {"accuracy": 1.0, "format": 0.1}})
    gdpo = group_advantages(rollouts.rewards().double(), [4], estimator="gdpo", lengths=rollouts.lengths(),
                            components=components, component_weights=weights)
    z = 0.5 / (math.sqrt(1 / 3) + 1e-4)  # each reward's group z-score, eps 1e-4 in the std
    summed = torch.tensor([z + 0.1 * z, z - 0.1 * z, -z + 0.1 * z, -z - 0.1 * z], dtype=torch.float64)
    whitened = summed / torch.sqrt(2 * summed.square().sum() / 7)  # over 8 tokens (2 each), mean 0
    torch.testing.assert_close(gdpo, whitened, atol=1e-7, rtol=0)
    torch.testing.assert_close(gdpo[0], -gdpo[3], atol=1e-12, rtol=0)  # exactly antisymmetric: no noise


def test_gdpo_refuses_process_rewards_which_are_not_in_the_total():
    rollouts = _rollouts()
    rollouts.groups[0].steps = [[(0, 1, 0.5)], []]
    with pytest.raises(ValueError, match="process reward"):
        rollouts.reward_components(WEIGHTS)


def test_gdpo_on_a_steps_rollouts_gives_each_reward_its_own_scale():
    """Scaling one task's reward by 100 changes GRPO's advantages of the mixed batch, not GDPO's."""
    rollouts = _rollouts()
    components, weights = rollouts.reward_components(WEIGHTS)
    scaled = components.clone()
    scaled[:, 2] *= 100
    gdpo = [group_advantages(rollouts.rewards().double(), rollouts.group_sizes, estimator="gdpo", eps=0.0,
                             lengths=rollouts.lengths(), components=c, component_weights=weights)
            for c in (components, scaled)]
    torch.testing.assert_close(gdpo[0], gdpo[1])
    assert not torch.allclose(gdpo[0], group_advantages(rollouts.rewards().double(), rollouts.group_sizes))


def test_a_checkpointed_round_keeps_each_groups_greedy_reward():
    """An asynchronous run's checkpoint holds rounds sampled ahead: ReMax's baselines must survive it."""
    from mmgrpo.trainer.rollout_records import rollouts_from_record, rollouts_record

    rollouts = _rollouts()
    rollouts.groups[0].greedy_reward = 0.75
    samples = {group.sample.id: group.sample for group in rollouts.groups}
    restored = rollouts_from_record(rollouts_record(rollouts), samples, prompts=None)
    assert [group.greedy_reward for group in restored.groups] == [0.75, None]
    assert restored.greedy_rewards()[0] == 0.75 and torch.isnan(restored.greedy_rewards()[1])
