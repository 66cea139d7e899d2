"""Multi-turn trajectories: the tokens tools wrote into a completion (``observation_spans``) take no loss, KL, entropy
or importance weight, and lengths (metrics, DAPO's overlong penalty) count only the tokens the policy sampled."""

from __future__ import annotations

import torch

from mmgrpo.trainer.rollouts import Group, Rollouts
from mmgrpo.trainer.step_metrics import rollout_metrics
from mmgrpo.trainer.update import build_loss_mask
from mmgrpo.types import Completion, Sample

# 3 policy tokens, a 4-token tool turn, 2 policy tokens
TRAJECTORY = Completion("...", [5, 6, 7, 90, 91, 92, 93, 8, 9], [-0.1] * 9, observation_spans=[(3, 7)])
PLAIN = Completion("...", [5, 6], [-0.1] * 2)


def test_the_loss_mask_leaves_out_observation_tokens_and_padding():
    mask = build_loss_mask([TRAJECTORY, PLAIN], [True, True], pad_token_id=0)
    assert mask.tolist() == [[1, 1, 1, 0, 0, 0, 0, 1, 1], [1, 1, 0, 0, 0, 0, 0, 0, 0]]
    assert build_loss_mask([TRAJECTORY], [False], pad_token_id=0).sum() == 0  # an excluded row stays excluded


def test_lengths_count_the_tokens_the_policy_sampled():
    group = Group(Sample("s", "t", []), [TRAJECTORY, PLAIN], [1.0, 0.0], {})
    rollouts = Rollouts(groups=[group])
    assert TRAJECTORY.policy_token_count == 5
    assert rollouts.lengths().tolist() == [5, 2]
    metrics = rollout_metrics(rollouts)
    assert (metrics["length/max"], metrics["length/total"]) == (5.0, 7.0)


def test_the_overlong_penalty_counts_policy_tokens_only():
    from mmgrpo.algos import overlong_penalty

    lengths = Rollouts(groups=[Group(Sample("s", "t", []), [TRAJECTORY], [1.0], {})]).lengths()
    assert overlong_penalty(lengths, 6, 2, 1.0).tolist() == [-0.5]  # 5 of 6 tokens, 1 into the 2-token buffer
    assert overlong_penalty(torch.tensor([len(TRAJECTORY.token_ids)]), 6, 2, 1.0).tolist() == [-1.0]  # all 9: past it
