"""Which prompts each rollout batch asks for, and all a checkpoint keeps of that choice.

Every rank keeps the same :class:`PromptDrawer` (same sampler, same skips) and draws all ranks'
prompts of a batch, keeping its own contiguous share: a group never straddles ranks, and the
data position a checkpoint records holds for any number of ranks.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from mmgrpo.config import Config
from mmgrpo.inputs import SampleSet
from mmgrpo.skipped_rows import SkipLedger, describe_skipped
from mmgrpo.trainer.group_sizes import GroupSizeTracker
from mmgrpo.trainer.prompt_sampler import PromptSampler
from mmgrpo.trainer.rollouts import Rollouts, draw_usable
from mmgrpo.types import Sample

logger = logging.getLogger(__name__)


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


@dataclass
class DrawerState:
    """What drawing changes: restoring it undoes the draws of a step cut short."""

    sampler: dict[str, Any]
    group_sizes: dict[str, Any]
    skipped_ids: set[str]
    batches_drawn: int


class PromptDrawer:
    """The next rollout batches of this rank: the sampler's prompts (never one skipped earlier in the
    run), each with its group size (``algo.dynamic_group_size``: from its successes so far), and
    first any batch drawn before a resume and never trained on."""

    def __init__(self, config: Config, train_set: SampleSet, skip_ledger: SkipLedger, *, rank: int, world_size: int) -> None:
        self.config, self.samples, self.skip_ledger = config, train_set.samples, skip_ledger
        self.rank, self.world_size = rank, world_size
        self.skipped_ids = skip_ledger.ids("train")  # left out by SFT or GRPO so far: never drawn again
        self.sampler = PromptSampler(
            len(self.samples), config.data.seed, weights=train_set.weights, shuffle=config.data.shuffle
        )
        self.group_sizes = GroupSizeTracker(
            g_min=config.algo.group_size_min, g_max=config.algo.group_size_max,
            budget_per_prompt=config.rollout.num_generations,
        )
        self.batches_drawn = 0  # rollout batches drawn so far (an async worker's requests are named by it)
        self.pending: deque[RolloutRequest] = deque()  # drawn before a resume, never trained on: requested first

    def draw(self) -> RolloutRequest:
        """The next rollout batch of this rank."""
        if self.pending:
            return self.pending.popleft()
        indices = self._draw_indices(self.config.rollout.prompts_per_step // self.world_size)
        sizes = self._group_sizes_for([self.samples[i] for i in indices])
        self.batches_drawn += 1
        return RolloutRequest(self.batches_drawn - 1, tuple(indices), tuple(sizes))

    def take(self, count: int) -> list[Sample]:
        """This rank's ``count`` of the next prompts."""
        return [self.samples[i] for i in self._draw_indices(count)]

    def record(self, rollouts: Rollouts, *, step: int, write_ledger: bool) -> None:
        """What a step's rollouts (every rank's) teach the drawer: each prompt's successes, and the
        prompts left out (to the ledger when ``write_ledger``, named in the log, never drawn again)."""
        for group in [*rollouts.groups, *rollouts.filtered]:
            self.group_sizes.record(group.sample.id, group.successes())
        if not rollouts.skipped:
            return
        self.skipped_ids.update(row.row_id for row in rollouts.skipped)
        if write_ledger:
            self.skip_ledger.add(rollouts.skipped, split="train", stage="grpo")
        logger.warning("step %d: skipped %d prompt(s): %s", step, len(rollouts.skipped), describe_skipped(rollouts.skipped))

    def snapshot(self) -> DrawerState:
        return DrawerState(self.sampler.state_dict(), self.group_sizes.state_dict(), set(self.skipped_ids), self.batches_drawn)

    def restore(self, state: DrawerState) -> None:
        self.sampler.load_state_dict(state.sampler)
        self.group_sizes.load_state_dict(state.group_sizes)
        self.skipped_ids = set(state.skipped_ids)
        self.batches_drawn = state.batches_drawn

    def checkpoint_extra(self, unconsumed: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """The checkpoint's record of the drawer beside the sampler's position; ``unconsumed``: every
        rank's batches drawn and not trained on."""
        return {
            "group_sizes": self.group_sizes.state_dict(), "skipped_sample_ids": sorted(self.skipped_ids),
            "unconsumed_batches": unconsumed, "batches_drawn": self.batches_drawn,
        }

    def load_checkpoint(self, data: dict[str, Any], extra: dict[str, Any], *, step: int) -> None:
        """The state :meth:`checkpoint_extra` and the sampler's ``data`` position recorded at ``step``."""
        self.sampler.load_state_dict(data)
        self.group_sizes.load_state_dict(extra["group_sizes"])
        self.skipped_ids = set(extra.get("skipped_sample_ids", []))
        self.pending = deque(ranks_share(extra.get("unconsumed_batches", []), self.rank, self.world_size))
        self.batches_drawn = int(extra.get("batches_drawn", step))

    def _draw_indices(self, count: int) -> list[int]:
        unusable = {i for i, sample in enumerate(self.samples) if sample.id in self.skipped_ids}
        if len(unusable) == len(self.samples):
            raise RuntimeError(f"every training sample was skipped; see {self.skip_ledger.path}")
        drawn = draw_usable(self.sampler.take, count * self.world_size, unusable)
        return drawn[self.rank * count : (self.rank + 1) * count]

    def _group_sizes_for(self, samples: list[Sample]) -> list[int]:
        if self.config.algo.dynamic_group_size:
            return self.group_sizes.sizes(samples)
        return [self.config.rollout.num_generations] * len(samples)
