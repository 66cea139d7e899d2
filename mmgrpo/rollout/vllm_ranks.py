"""vLLM engines that span ranks: ``rollout.vllm.tensor_parallel_size`` > 1 on several ranks.

Ranks ``[0, tp)``, ``[tp, 2 tp)``, ... each form one tensor-parallel engine (vLLM's ``external_launcher``:
every rank of the group runs the engine's code in its own process, holding its slice of the weights, as
torchrun started it). Such an engine is one program run on every rank of its group: each rank must make
the same calls with the same requests. So each call gathers the group's requests in rank order, every
rank submits all of them, and each keeps the outputs of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.distributed as dist

from mmgrpo.distributed import Ranks

EXECUTOR = "external_launcher"


def tensor_parallel_group(ranks: Ranks, size: int) -> dist.ProcessGroup:
    """This rank's group of ``size`` consecutive ranks (the layout vLLM gives its tensor-parallel groups; ``size``
    divides the ranks: config validation); every rank makes every group, in the same order (a collective)."""
    groups = [dist.new_group(list(range(first, first + size))) for first in range(0, ranks.world_size, size)]
    return groups[ranks.rank // size]


def group_requests(group: dist.ProcessGroup, own: Sequence[Any]) -> tuple[list[Any], slice]:
    """Every rank's ``own`` requests of the engine's group, in rank order, and where this rank's are."""
    every: list[Sequence[Any] | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, list(own), group=group)
    mine = dist.get_rank(group)
    start = sum(len(requests) for requests in every[:mine])
    return [request for requests in every for request in requests], slice(start, start + len(own))
