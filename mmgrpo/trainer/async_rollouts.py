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
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from mmgrpo.config import Config
from mmgrpo.models.freezing import frozen_parts
from mmgrpo.rollout.base import SamplingParams
from mmgrpo.trainer.backends import TrainingBackend
from mmgrpo.trainer.prompt_drawer import PromptDrawer, RolloutRequest
from mmgrpo.trainer.rollout_worker import (
    RolloutWorker,
    WorkerSpec,
    warn_if_stale_uncorrected,
    worker_model_dir,
)
from mmgrpo.trainer.rollouts import Group, Rollouts, ScoringRule
from mmgrpo.trainer.step_metrics import staleness_metrics
from mmgrpo.types import Sample


class AsyncRollouts:
    """Rounds of scored groups from a worker process, at most ``max_staleness`` policy versions old.

    ``draw()`` gives the next batch to request (the trainer's prompt order); ``params_for(batch)``
    its sampling parameters; ``weights()`` the policy's weights after an update (frozen ones, which
    never change, left out: the worker keeps its first copy); ``version`` is the policy's version
    (its step count) at the start.
    """

    needs_loaded_media = False  # the worker encodes its own prompts; the trainer's batches only train

    def __init__(
        self,
        worker: RolloutWorker,
        draw: Callable[[], RolloutRequest],
        samples: Sequence[Sample],
        params_for: Callable[[int], SamplingParams],
        weights: Callable[[], Any],
        *,
        max_staleness: int,
        version: int,
    ) -> None:
        self.worker, self.draw, self.samples, self.params_for, self.weights = worker, draw, samples, params_for, weights
        self.max_staleness = max_staleness
        self.version = version
        self.requested: deque[RolloutRequest] = deque()
        self.worker_seconds = 0.0  # the worker's time on the batches received since the last step

    @classmethod
    def start(
        cls, config: Config, model: torch.nn.Module, processor: Any, backend: TrainingBackend, drawer: PromptDrawer,
        scoring: Mapping[str, ScoringRule], params_for: Callable[[int], SamplingParams], *, run_dir: Path, version: int,
    ) -> AsyncRollouts:
        """A worker process on a copy of ``model`` as it is now (written once, read by every rank's worker)."""
        model_dir = worker_model_dir(model, processor, run_dir, backend.shards_weights) if backend.ranks.is_main_process else None
        spec = WorkerSpec(
            config=config.to_dict(), model_dir=backend.ranks.broadcast_object(model_dir),
            device=config.rollout.worker_device or str(next(model.parameters()).device), scoring=dict(scoring),
        )
        warn_if_stale_uncorrected(config)
        worker = RolloutWorker(spec, backend.whole_weights(), version=version)
        frozen = frozen_parts(model, config.model).names
        return cls(worker, drawer.draw, drawer.samples, params_for, partial(backend.whole_weights, frozen),
                   max_staleness=config.rollout.max_staleness, version=version)

    def next_round(self, step: int, round_index: int) -> Rollouts:
        """The oldest requested batch, scored, after topping the requests up to the bound; each group
        carries ``policy_version``, the version that sampled it. (A batch's seed comes from its
        request, not from ``step`` and ``round_index``.)"""
        while len(self.requested) <= self.max_staleness:
            self._submit(self.draw())
        request = self.requested.popleft()
        result = self.worker.receive()
        if result.request_id != request.batch:
            raise RuntimeError(f"the rollout worker answered batch {result.request_id}, expected {request.batch}")
        by_id = {self.samples[i].id: self.samples[i] for i in request.indices}
        for group in result.rollouts.groups:
            group.sample, group.policy_version = by_id[group.sample.id], result.version
        self.worker_seconds += result.seconds
        return result.rollouts

    def publish_weights(self) -> None:
        """The policy's weights after an optimizer step: the next version, for the batches requested from now on."""
        self.version += 1
        self.worker.publish(self.weights(), self.version)

    def in_flight(self) -> Sequence[RolloutRequest]:
        return tuple(self.requested)

    def step_metrics(self, groups: Sequence[Group], step: int) -> dict[str, float]:
        """The staleness of the groups step ``step`` trains on, and the worker's time on them."""
        seconds, self.worker_seconds = self.worker_seconds, 0.0
        return staleness_metrics(groups, step, self.max_staleness) | {"async/worker_seconds": seconds}

    def close(self) -> None:
        self.worker.close()

    def _submit(self, request: RolloutRequest) -> None:
        samples = [self.samples[i] for i in request.indices]
        self.worker.submit(request.batch, samples, request.group_sizes, self.params_for(request.batch))
        self.requested.append(request)
