"""Asynchronous rollout: a worker samples the next batches while the trainer trains on this one.

``rollout.mode: async`` keeps up to ``rollout.max_staleness + 1`` rollout batches requested
from a :class:`~mmgrpo.trainer.rollout_worker.RolloutWorker` ahead of training. Requests are
only ever made right after a weight update (or at the start), so a batch requested while the
trainer's policy is version v is sampled by version v (the worker never takes a later one, so a
run's staleness does not depend on timing), and trained on by step v + max_staleness at the
latest: no group is ever older than the bound, none is dropped.
``max_staleness: 0`` is the synchronous schedule run through the worker (same prompts, same
seeds, same completions as ``rollout.mode: sync``); ``1`` is one-step-off-policy (verl's,
OpenRLHF's): the worker samples batch s + 1 while the trainer trains on batch s.

Off-policy groups are corrected in the loss with the sampler's log-probs (``algo.is_correction``,
:mod:`mmgrpo.algos.mismatch`); the trainer logs each step's staleness histogram.

Resume: the batches in flight at a checkpoint (drawn, not yet trained on) are recorded in it with
the rounds already sampled of them (the checkpoint waits for the worker to answer them), and the
resumed run trains on those rounds first: it repeats the uninterrupted run exactly.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from mmgrpo.config import Config
from mmgrpo.models.batch import PromptBatch
from mmgrpo.models.freezing import unchanging_weights
from mmgrpo.rollout.base import SamplingParams
from mmgrpo.trainer.backends import TrainingBackend
from mmgrpo.trainer.prompt_drawer import PromptDrawer, RolloutRequest
from mmgrpo.trainer.rollout_records import rollouts_from_record, rollouts_record
from mmgrpo.trainer.rollout_worker import (
    RolloutWorker,
    RolloutWorkerError,
    WorkerSpec,
    warn_if_stale_uncorrected,
    worker_model_dir,
)
from mmgrpo.trainer.rollouts import Group, Rollouts, ScoringRule
from mmgrpo.trainer.step_metrics import staleness_metrics
from mmgrpo.types import Sample

logger = logging.getLogger(__name__)


class AsyncRollouts:
    """Rounds of scored groups from a worker process, at most ``max_staleness`` policy versions old.

    ``draw()`` gives the next batch to request (the trainer's prompt order); ``params_for(batch)``
    its sampling parameters; ``weights()`` the policy's weights after an update (those no update changes left
    out: the worker keeps its first copy); ``version`` is the policy's version
    (its step count) at the start; ``restored``: rounds a checkpoint kept (:meth:`recorded_rollouts`),
    given to the trainer when their batch is requested instead of sampled.
    """

    needs_loaded_media = False  # the worker encodes its own prompts; the trainer's batches only train

    def __init__(
        self,
        worker: RolloutWorker,
        draw: Callable[[], RolloutRequest],
        samples: Sequence[Sample],
        params_for: Callable[[int], SamplingParams],
        weights: Callable[[], Any],
        encode: Callable[[list[Sample]], PromptBatch],
        *,
        max_staleness: int,
        version: int,
        restored: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.worker, self.draw, self.samples, self.params_for, self.weights = worker, draw, samples, params_for, weights
        self.encode = encode
        self.max_staleness = max_staleness
        self.version = version
        self.requested: deque[RolloutRequest] = deque()
        self.worker_seconds = 0.0  # the worker's time on the batches received since the last step
        self.ready: dict[int, Rollouts] = {}  # requested batches received (or restored) before their turn
        self.records: dict[int, dict[str, Any]] = {record["batch"]: record for record in restored}  # as a checkpoint keeps them
        self.restored = set(self.records)  # not yet requested: never sent to the worker

    @classmethod
    def start(
        cls, config: Config, model: torch.nn.Module, processor: Any, backend: TrainingBackend, drawer: PromptDrawer,
        scoring: Mapping[str, ScoringRule], params_for: Callable[[int], SamplingParams],
        encode: Callable[[list[Sample]], PromptBatch], *, run_dir: Path, version: int, restored: Sequence[dict[str, Any]] = (),
    ) -> AsyncRollouts:
        """A worker process on a copy of ``model`` as it is now (written once, read by every rank's worker)."""
        model_dir = worker_model_dir(model, processor, run_dir, backend.shards_weights) if backend.ranks.is_main_process else None
        unchanging = unchanging_weights(model)
        spec = WorkerSpec(
            config=config.to_dict(), model_dir=backend.ranks.broadcast_object(model_dir),
            device=config.rollout.worker_device or str(next(model.parameters()).device), scoring=dict(scoring),
            unchanging=unchanging,
        )
        warn_if_stale_uncorrected(config)
        worker = RolloutWorker(spec, backend.whole_weights(), version=version)
        return cls(worker, drawer.draw, drawer.samples, params_for, partial(backend.whole_weights, unchanging), encode,
                   max_staleness=config.rollout.max_staleness, version=version, restored=restored)

    def next_round(self, step: int, round_index: int) -> Rollouts:
        """The oldest requested batch, scored, after topping the requests up to the bound; each group
        carries ``policy_version``, the version that sampled it. (A batch's seed comes from its
        request, not from ``step`` and ``round_index``.)"""
        while len(self.requested) <= self.max_staleness:
            self._submit(self.draw())
        if round_index == 0:  # a checkpoint from now on keeps no round older than the oldest requested
            oldest = self.requested[0].batch
            self.records = {batch: record for batch, record in self.records.items() if batch >= oldest}
        request = self.requested.popleft()
        if request.batch not in self.ready:
            self._receive(request)
        return self.ready.pop(request.batch)

    def recorded_rollouts(self, batches: Sequence[int]) -> list[dict[str, Any]]:
        """The rounds of ``batches`` (drawn, not trained on) as a checkpoint keeps them, receiving those the
        worker is still sampling; none of a batch not yet requested. A worker that cannot answer (it
        died with the trainer's stop) leaves its batches out: the resumed run samples them anew."""
        try:
            for request in self.requested:
                if request.batch in batches and request.batch not in self.ready:
                    self._receive_through(request)
        except RolloutWorkerError as error:
            logger.warning("the batches in flight are not kept in the checkpoint (%s): a resumed run samples "
                           "them anew", error)
        return [self.records[batch] for batch in batches if batch in self.records]

    def before_update(self) -> None:
        """The worker's engine samples on through the update: nothing to give back."""

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
        self.requested.append(request)
        if request.batch in self.restored:  # sampled before the checkpoint: the very same round again
            self.restored.discard(request.batch)
            samples = [self.samples[i] for i in request.indices]
            self.ready[request.batch] = rollouts_from_record(
                self.records[request.batch], {sample.id: sample for sample in samples}, self.encode(samples)
            )
            return
        samples = [self.samples[i] for i in request.indices]
        self.worker.submit(request.batch, samples, request.group_sizes, self.params_for(request.batch))

    def _receive_through(self, wanted: RolloutRequest) -> None:
        """Receive every requested round up to ``wanted``'s (the worker answers in request order)."""
        for request in self.requested:
            if request.batch not in self.ready:
                self._receive(request)
            if request is wanted:
                return

    def _receive(self, request: RolloutRequest) -> None:
        """The worker's next round, which must be ``request``'s, ready and recorded."""
        result = self.worker.receive()
        if result.request_id != request.batch:
            raise RuntimeError(f"the rollout worker answered batch {result.request_id}, expected {request.batch}")
        by_id = {self.samples[i].id: self.samples[i] for i in request.indices}
        for group in result.rollouts.groups:
            group.sample, group.policy_version = by_id[group.sample.id], result.version
        self.worker_seconds += result.seconds
        self.ready[request.batch] = result.rollouts
        self.records[request.batch] = {"batch": request.batch, **rollouts_record(result.rollouts)}
