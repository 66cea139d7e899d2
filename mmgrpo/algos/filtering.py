"""DAPO dynamic sampling: keep only groups whose rewards are not all equal.

A group with equal rewards has zero advantage for every member, so it adds no policy
gradient, only dilutes the batch (DAPO, arXiv 2503.14476, section 3.2).
"""

from __future__ import annotations

from typing import Sequence

import torch


def informative_groups(rewards: torch.Tensor, group_sizes: Sequence[int], *, atol: float = 1e-6) -> torch.Tensor:
    """Bool ``[num_groups]``: True where a group's rewards differ by more than ``atol``.

    ``rewards`` is ``[N]`` laid out group after group, ``sum(group_sizes) == N``.
    """
    if sum(group_sizes) != rewards.numel():
        raise ValueError(f"group sizes sum to {sum(group_sizes)} but there are {rewards.numel()} rewards")
    groups = torch.split(rewards, list(group_sizes))
    return torch.tensor([bool(g.numel() > 1 and (g.max() - g.min()) > atol) for g in groups], dtype=torch.bool)
