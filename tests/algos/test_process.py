"""Process supervision math, checked by hand against DeepSeekMath's process-supervised GRPO."""

from __future__ import annotations

import math

import pytest
import torch

from mmgrpo.algos.process import normalized_step_rewards, process_advantages, step_end_tokens

SQRT_4_3 = math.sqrt(4 / 3)


def test_step_rewards_are_normalised_over_every_step_of_the_group() -> None:
    # group 1: completion 0 has steps [1, -1], completion 1 has [1]: R = {1, -1, 1}, mean 1/3,
    # unbiased std sqrt(((2/3)^2 + (4/3)^2 + (2/3)^2) / 2) = sqrt(4/3).
    # group 2: one completion, steps [5, 7]: mean 6, std sqrt(2).
    normalized = normalized_step_rewards([[1.0, -1.0], [1.0], [5.0, 7.0]], [2, 1], eps=0.0)
    assert normalized[0] == pytest.approx([(2 / 3) / SQRT_4_3, (-4 / 3) / SQRT_4_3])
    assert normalized[1] == pytest.approx([(2 / 3) / SQRT_4_3])
    assert normalized[2] == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)])


def test_centred_only_single_step_and_stepless_groups() -> None:
    assert normalized_step_rewards([[1.0, 3.0], []], [2], scale_std=False) == [[-1.0, 1.0], []]
    assert normalized_step_rewards([[4.0], []], [2]) == [[0.0], []]  # one step: std 0, centred to 0
    assert normalized_step_rewards([[], []], [2]) == [[], []]
    with pytest.raises(ValueError, match="sum to 3"):
        normalized_step_rewards([[1.0]], [3])


def test_token_advantage_sums_the_steps_ending_at_or_after_it() -> None:
    # completion 0: steps ending at tokens 2 and 5 with rewards 0.5 and -1; length 7
    # tokens 0-2: 0.5 + (-1) = -0.5; tokens 3-5: -1; token 6 (after the last step): 0.
    # completion 1: one step ending at token 3 with reward 2; a step ending past the row is clipped.
    advantages = process_advantages([[2, 5], [3, 9]], [[0.5, -1.0], [2.0, 0.25]], 7)
    assert advantages.tolist() == [
        [-0.5, -0.5, -0.5, -1.0, -1.0, -1.0, 0.0],
        [2.25, 2.25, 2.25, 2.25, 0.25, 0.25, 0.25],
    ]
    assert process_advantages([[]], [[]], 3).tolist() == [[0.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="2 step ends but 1 rewards"):
        process_advantages([[1, 2]], [[1.0]], 3)


def test_step_ends_land_on_the_token_holding_the_last_character() -> None:
    # tokens "ab", "c\n", "de": text lengths after each token 2, 4, 6
    ends = [2, 4, 6]
    spans = [(0, 1, 1.0), (0, 2, 1.0), (2, 3, 1.0), (4, 6, 1.0), (5, 9, 1.0)]
    assert step_end_tokens(spans, ends) == [0, 0, 1, 2, 2]


def test_flipping_a_steps_sign_flips_its_tokens_advantage() -> None:
    good = process_advantages([[1, 3]], normalized_step_rewards([[1.0, 0.0]], [1], eps=0.0), 4)
    bad = process_advantages([[1, 3]], normalized_step_rewards([[0.0, 1.0]], [1], eps=0.0), 4)
    assert torch.equal(good[:, :2], torch.zeros(1, 2)) and good[0, 3] < 0
    assert bad[0, 3] > 0
