"""Engines whose decoding is a collective of the ranks (``lockstep``: the HF engine over ZeRO-3 or FSDP2
weights, a vLLM engine spanning ranks): every rank must make as many decoding ``generate`` calls, in the
same order, even a rank with nothing of its own to decode in one (an empty share, or one whose every
prompt was left out for bad media). :func:`in_lockstep` wraps such an engine so that such a call decodes a
stand-in item instead, whose completions are discarded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mmgrpo.models.batch import PromptBatch
from mmgrpo.rollout.base import RolloutEngine, SamplingParams
from mmgrpo.types import Completion, Sample


class LockstepFiller:
    """Decodes the first of ``candidates`` the engine can take (every rank finds the same one, given the same
    candidates; none when the engine can take none of them, and then on no rank), its completions discarded."""

    def __init__(self, engine: RolloutEngine, candidates: Sequence[Sample]) -> None:
        self.engine, self.candidates = engine, candidates
        self.found: tuple[Sample, PromptBatch] | None = None
        self.searched = False

    def decode(self, params: SamplingParams) -> None:
        if not self.searched:
            self.searched = True
            encoded = ((sample, self.engine.encode([sample])) for sample in self.candidates)
            self.found = next(((sample, prompts) for sample, prompts in encoded if prompts.kept), None)
        if self.found is not None:
            sample, prompts = self.found
            self.engine.generate([sample], params, prompts=prompts)


class InLockstep:
    """``engine`` (a lockstep one), except that a ``generate`` with nothing to decode decodes a stand-in from
    ``candidates`` (:class:`LockstepFiller`); everything else is the engine's."""

    def __init__(self, engine: RolloutEngine, candidates: Sequence[Sample]) -> None:
        self.engine = engine
        self.filler = LockstepFiller(engine, candidates)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def encode(self, samples: Sequence[Sample]) -> PromptBatch | None:
        return self.engine.encode(samples) if samples else None

    def generate(
        self, samples: Sequence[Sample], params: SamplingParams, group_sizes: Sequence[int] | None = None, *,
        prompts: PromptBatch | None = None,
    ) -> list[list[Completion]]:
        if samples:
            prompts = prompts if prompts is not None else self.engine.encode(samples)
            if prompts is None or prompts.kept:  # None: an engine that encodes as it generates
                return self.engine.generate(samples, params, group_sizes, prompts=prompts)
        self.filler.decode(params)
        return [[] for _ in samples]


def in_lockstep(engine: RolloutEngine, candidates: Sequence[Sample]) -> RolloutEngine:
    """``engine`` as :class:`InLockstep` when its decoding is a collective (stand-ins from ``candidates``, the
    same list on every rank); itself otherwise."""
    if isinstance(engine, InLockstep):
        engine = engine.engine
    return InLockstep(engine, candidates) if engine.lockstep else engine
