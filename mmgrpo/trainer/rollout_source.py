"""Where a GRPO step's scored groups come from (``rollout.mode``): sampled here by the step that trains
on them (``sync``), or ahead of training by a worker process (``async``, :mod:`.async_rollouts`).

The trainer sees one :class:`RolloutSource` and no mode: a new mode is one class with a ``start``
constructor and one line in :data:`ROLLOUT_SOURCES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from mmgrpo.config import Config
from mmgrpo.models.batch import PromptBatch
from mmgrpo.rollout.base import RolloutEngine, SamplingParams
from mmgrpo.trainer.async_rollouts import AsyncRollouts
from mmgrpo.trainer.backends import TrainingBackend
from mmgrpo.trainer.prompt_drawer import PromptDrawer, RolloutRequest
from mmgrpo.trainer.rollouts import (
    Group,
    Rollouts,
    ScoringRule,
    needs_greedy_baseline,
    sample_round,
    with_round_seed,
)
from mmgrpo.rollout.lockstep import in_lockstep
from mmgrpo.trainer.setup import build_engine, sampling_params
from mmgrpo.types import Sample

_RANK_SEED_STRIDE = 1_000_003  # rank r samples with seed + r * this: ranks draw different tokens
_STEP_SEED_STRIDE = 100_003  # step (rollout batch) s samples with seed * this + s


class RolloutSource(Protocol):
    """Rounds of scored groups for the trainer's steps, sampled by the policy's latest weights it was given."""

    needs_loaded_media: bool  # the trainer's prompt batches feed its engine, which needs media loaded (no cache)

    def next_round(self, step: int, round_index: int) -> Rollouts:
        """Round ``round_index`` of step ``step``'s rollouts (0-based)."""

    def before_update(self) -> None:
        """The policy update starts (an engine sharing the trainer's device may give its memory back)."""

    def publish_weights(self) -> None:
        """After an optimizer step: the rounds asked from now on come from the new weights."""

    def in_flight(self) -> Sequence[RolloutRequest]:
        """Batches drawn and not yet given to the trainer, oldest first (a checkpoint keeps them)."""

    def recorded_rollouts(self, batches: Sequence[int]) -> list[dict[str, Any]]:
        """The rounds already sampled of ``batches`` (drawn, not trained on), as a checkpoint keeps them:
        a resumed run trains on them instead of sampling anew."""

    def step_metrics(self, groups: Sequence[Group], step: int) -> dict[str, float]:
        """This source's metrics of the groups step ``step`` (0-based) trains on."""

    def close(self) -> None: ...


@dataclass
class SourceContext:
    """What a rollout source is built from: the trainer's policy and its data, as of step ``version``."""

    config: Config
    model: torch.nn.Module
    processor: Any
    backend: TrainingBackend
    drawer: PromptDrawer
    scoring: Mapping[str, ScoringRule]
    encode: Callable[[list[Sample]], PromptBatch]  # the trainer's prompt encoding (its cache included)
    run_dir: Path
    version: int  # the policy's version (its step count) at the start
    restored: Sequence[dict[str, Any]] = ()  # rounds the resumed checkpoint kept (RolloutSource.recorded_rollouts)

    def params_for(self, batch: int) -> SamplingParams:
        """This rank's sampling parameters of rollout batch ``batch`` (sync mode: step ``batch``)."""
        seed = self.config.seed * _STEP_SEED_STRIDE + batch + self.backend.ranks.rank * _RANK_SEED_STRIDE
        return sampling_params(self.config, seed=seed)


class SyncRollouts:
    """Each round sampled in this process by the engine around the policy being trained."""

    def __init__(self, engine: RolloutEngine, context: SourceContext) -> None:
        self.engine, self.context = engine, context
        self.needs_loaded_media = engine.needs_loaded_media

    @classmethod
    def start(cls, context: SourceContext) -> SyncRollouts:
        engine = build_engine(context.config, context.model, context.processor, context.backend)
        return cls(in_lockstep(engine, context.drawer.samples), context)  # a rank with every prompt dropped keeps in step

    def next_round(self, step: int, round_index: int) -> Rollouts:
        context = self.context
        request = context.drawer.draw()
        samples = [context.drawer.samples[i] for i in request.indices]
        params = with_round_seed(context.params_for(step), round_index)
        return sample_round(self.engine, context.encode(samples), samples, request.group_sizes, context.scoring, params,
                            greedy_baseline=needs_greedy_baseline(context.config))

    def before_update(self) -> None:
        self.engine.before_update()

    def publish_weights(self) -> None:
        self.engine.update_weights(self.context.model)

    def in_flight(self) -> Sequence[RolloutRequest]:
        return ()

    def recorded_rollouts(self, batches: Sequence[int]) -> list[dict[str, Any]]:
        return []  # each round is sampled by the step that trains on it: none is ever ahead

    def step_metrics(self, groups: Sequence[Group], step: int) -> dict[str, float]:
        return {}

    def close(self) -> None:
        """Nothing runs apart from the trainer."""


def start_async(context: SourceContext) -> AsyncRollouts:
    """A rollout worker process on a copy of the current policy, sampling ahead of training."""
    return AsyncRollouts.start(
        context.config, context.model, context.processor, context.backend, context.drawer, context.scoring,
        context.params_for, context.encode, run_dir=context.run_dir, version=context.version,
        restored=context.restored,
    )


ROLLOUT_SOURCES: dict[str, Callable[[SourceContext], RolloutSource]] = {
    "sync": SyncRollouts.start,
    "async": start_async,
}


def start_rollout_source(context: SourceContext) -> RolloutSource:
    """The source ``rollout.mode`` names, started from the policy as it is now."""
    return ROLLOUT_SOURCES[context.config.rollout.mode](context)
