"""Asynchronous rollout: a worker samples the next batches while the trainer trains on this one.

``rollout.mode: async`` keeps up to ``rollout.max_staleness + 1`` rollout batches requested
from a :class:`~mmgrpo.trainer.rollout_worker.RolloutWorker` ahead of training. Requests are
only ever made right after a weight update (or at the start), so a batch requested while the
trainer's policy is version v is sampled by version v or later, and trained on by step
v + max_staleness at the latest: no group is ever older than the bound, none is dropped.
``max_staleness: 0`` is the synchronous schedule run through the worker (same prompts, same
seeds, same completions as ``rollout.mode: sync``); ``1`` is one-step-off-policy (verl's,
OpenRLHF's): the worker samples batch s + 1 while the trainer trains on batch s.

Off-policy groups are corrected in the loss with the sampler's log-probs (``algo.is_correction``,
:mod:`mmgrpo.algos.mismatch`); the trainer logs each step's staleness histogram.

Resume: the batches in flight at a checkpoint (drawn, not yet trained on) are recorded in it
and requested again first, so a resumed run trains on every prompt exactly once and in the
same order as the uninterrupted run; their completions are sampled anew by the resumed policy.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mmgrpo.rollout.base import SamplingParams
from mmgrpo.trainer.rollout_worker import RolloutWorker
from mmgrpo.trainer.rollouts import Rollouts
from mmgrpo.types import Sample


@dataclass(frozen=True)
class RolloutRequest:
    """One rollout batch: which training samples (by index), with which group sizes."""

    batch: int  # its place among the run's rollout batches: seeds its sampling, names it
    indices: tuple[int, ...]
    group_sizes: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "indices": list(self.indices), "group_sizes": list(self.group_sizes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutRequest:
        return cls(int(data["batch"]), tuple(data["indices"]), tuple(data["group_sizes"]))


def ranks_share(recorded: list, rank: int, world_size: int) -> list[RolloutRequest]:
    """Rank ``rank``'s part of the rollout batches a checkpoint recorded as drawn and not trained on.

    ``recorded`` holds each saving rank's list of batches (``RolloutRequest.to_dict``), in rank
    order; checkpoints written before ranks were recorded hold one list of batches. A batch's
    prompts are the ranks' parts joined in rank order (how they were drawn), so they are split
    again for ``world_size`` ranks, which need not be the number that saved them.
    """
    if recorded and isinstance(recorded[0], dict):
        recorded = [recorded]  # the one-process layout
    shares = []
    for parts in zip(*(map(RolloutRequest.from_dict, batches) for batches in recorded)):
        indices = [index for part in parts for index in part.indices]
        sizes = [size for part in parts for size in part.group_sizes]
        count = len(indices) // world_size
        mine = slice(rank * count, (rank + 1) * count)
        shares.append(RolloutRequest(parts[0].batch, tuple(indices[mine]), tuple(sizes[mine])))
    return shares


class AsyncRollouts:
    """Rounds of scored groups from a worker process, at most ``max_staleness`` policy versions old.

    ``draw()`` gives the next batch to request (the trainer's prompt order); ``params_for(batch)``
    its sampling parameters; ``version`` is the policy's version (its step count) at the start.
    """

    def __init__(
        self,
        worker: RolloutWorker,
        draw: Callable[[], RolloutRequest],
        samples: Sequence[Sample],
        params_for: Callable[[int], SamplingParams],
        *,
        max_staleness: int,
        version: int,
    ) -> None:
        self.worker, self.draw, self.samples, self.params_for = worker, draw, samples, params_for
        self.max_staleness = max_staleness
        self.version = version
        self.in_flight: deque[RolloutRequest] = deque()
        self.worker_seconds = 0.0  # the worker's time on the batches received since the last take

    def next_round(self, round_index: int) -> Rollouts:
        """The oldest requested batch, scored, after topping the requests up to the bound; each group
        carries ``policy_version``, the version that sampled it. (``round_index`` is the step's round:
        a batch's seed comes from its request.)"""
        while len(self.in_flight) <= self.max_staleness:
            self._submit(self.draw())
        request = self.in_flight.popleft()
        result = self.worker.receive()
        if result.request_id != request.batch:
            raise RuntimeError(f"the rollout worker answered batch {result.request_id}, expected {request.batch}")
        by_id = {self.samples[i].id: self.samples[i] for i in request.indices}
        for group in result.rollouts.groups:
            group.sample, group.policy_version = by_id[group.sample.id], result.version
        self.worker_seconds += result.seconds
        return result.rollouts

    def push_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The policy's ``weights`` after an optimizer step: the next version, for the batches requested from now on."""
        self.version += 1
        self.worker.publish(weights, self.version)

    def take_worker_seconds(self) -> float:
        seconds, self.worker_seconds = self.worker_seconds, 0.0
        return seconds

    def close(self) -> None:
        self.worker.close()

    def _submit(self, request: RolloutRequest) -> None:
        samples = [self.samples[i] for i in request.indices]
        self.worker.submit(request.batch, samples, request.group_sizes, self.params_for(request.batch))
        self.in_flight.append(request)
