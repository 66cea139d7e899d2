"""SFT demonstrations that call tools: a task's scripted policy turns, the tools run between them as a rollout
runs them, so the cold start shows the policy the very tool turns (crops included) it will see in GRPO.

A task that demonstrates tool use returns several turns from ``reference_turns`` (a call, then the answer).
:class:`ScriptedTurns` is a rollout engine that "samples" those turns; wrapped in
:class:`~mmgrpo.rollout.tool_turns.ToolTurns`, the demonstration becomes one trajectory
(:class:`~mmgrpo.types.Completion`) whose tool tokens are masked out of the loss like a rollout's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from mmgrpo.models.batch import MediaBudgets, PromptBatch, build_prompt_batch
from mmgrpo.models.special_tokens import tokenizer_of
from mmgrpo.rollout.base import SamplingParams
from mmgrpo.rollout.tool_turns import ToolTurns
from mmgrpo.types import Completion, Sample

DEMONSTRATION_PARAMS = SamplingParams(n=1, max_new_tokens=1, seed=0)  # a scripted engine reads neither


class ScriptedTurns:
    """An engine whose k-th turn for a sample is ``turns[id(sample)][k]`` followed by the end-of-turn token (keyed by
    the sample object: a batch may hold one sample twice, each its own demonstration)."""

    needs_loaded_media = False  # it takes the encoded prompt batches the tool turns build
    lockstep = False

    def __init__(self, processor: Any, budgets: MediaBudgets, family: str, turns: Mapping[int, Sequence[str]],
                 end_of_turn: int) -> None:
        self.processor, self.budgets, self.family, self.turns = processor, budgets, family, turns
        self.end_of_turn, self.tokenizer = end_of_turn, tokenizer_of(processor)
        self.taken: Counter[int] = Counter()

    def encode(self, samples: Sequence[Sample]) -> PromptBatch:
        return build_prompt_batch(self.processor, samples, self.budgets, family=self.family)

    def generate(self, samples: Sequence[Sample], params: SamplingParams, group_sizes: Sequence[int] | None = None,
                 *, prompts: PromptBatch | None = None) -> list[list[Completion]]:
        prompts = prompts if prompts is not None else self.encode(samples)
        groups: list[list[Completion]] = [[] for _ in samples]
        for index in prompts.kept:
            key = id(samples[index])
            text = self.turns[key][self.taken[key]]
            self.taken[key] += 1
            ids = [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.end_of_turn]
            groups[index] = [Completion(text, ids)]
        return groups


def demonstrated(samples: Sequence[Sample], turns: Sequence[Sequence[str]], tool_turns: Callable[..., ToolTurns],
                 engine: Callable[[Mapping[int, Sequence[str]]], ScriptedTurns]) -> list[Completion | None]:
    """Each sample's demonstration as a trajectory (None where its prompt did not encode): ``turns[i]`` are sample
    i's policy turns; ``tool_turns(engine, max_turns)`` wraps the scripted ``engine(turns by sample object)``."""
    samples = [replace(sample) for sample in samples]  # one object per demonstration
    scripted = engine({id(sample): list(parts) for sample, parts in zip(samples, turns)})
    rollout = tool_turns(scripted, max(len(parts) for parts in turns))
    groups = rollout.generate(samples, DEMONSTRATION_PARAMS, [1] * len(samples))
    return [group[0] if group else None for group in groups]
