import pytest
import torch

from mmgrpo.algos.filtering import informative_groups


def test_constant_groups_are_dropped():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.2])
    keep = informative_groups(rewards, [2, 2, 2, 3, 1])
    assert keep.tolist() == [False, True, False, False, False]


def test_sizes_must_cover_rewards():
    with pytest.raises(ValueError, match="sum to 3"):
        informative_groups(torch.zeros(4), [1, 2])
