"""Multi-turn rollouts with tools: the policy calls a tool, reads its result, and goes on.

:class:`ToolTurns` wraps an engine. The first turn of each group is the engine's own (group-shared) sampling;
a turn that ends (a stop token) holding a ``<tool_call>`` gets the call run (:mod:`tasks.tools`) and its
observation appended as a ``tool`` turn rendered by the model's own chat template, followed by the assistant
turn's opening; the policy then samples its next turn from the prompt, its media and the trajectory so far,
up to ``max_turns`` turns. The trajectory is one :class:`~mmgrpo.types.Completion` whose
``observation_spans`` mark the tools' tokens (no loss on them) and ``tool_outcomes`` each call's outcome.

Observations are text: a tool's images (``zoom_in``) are not yet shown to the policy (their text is, and the
call counts as ``images_dropped``). The wrapped engine must decode from encoded prompt batches (``hf``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import torch

from mmgrpo.models.batch import EncodedRow, PromptBatch, batch_from_rows
from mmgrpo.models.special_tokens import tokenizer_of
from mmgrpo.rollout.base import RolloutEngine, SamplingParams
from mmgrpo.types import Completion, Sample
from tasks.tools import Observation, Tool, ToolCall, ToolContext, find_calls, run_call

_MARK = "\u2063MMGRPO-TURN\u2063"  # stands for the policy's turn where the chat template renders the conversation
_OBSERVATION = "\u2063MMGRPO-OBSERVATION\u2063"  # and for the tool's text, tokenized apart
MAX_CONCURRENT_CALLS = 16
"""Tool calls of one turn run at once, up to this many: a call waits (the python tool: up to its wall clock), and a
batch's calls one after another would cost the rollout the sum of their waits."""


@dataclass
class _Trajectory:
    sample: Sample
    row: int  # its prompt's row in the prompt batch
    completion: Completion
    turns: int = 1


class ToolTurns:
    """``engine`` sampling trajectories of up to ``max_turns`` policy turns with ``tools`` (see the module)."""

    def __init__(self, engine: RolloutEngine, processor: Any, tools: Mapping[str, Tool], max_turns: int,
                 context_of: Callable[[Sample], ToolContext], max_observation_tokens: int = 256) -> None:
        self.engine, self.processor, self.tools, self.max_turns = engine, processor, dict(tools), max_turns
        self.max_observation_tokens = max_observation_tokens
        self.context_of = context_of
        self.tokenizer = tokenizer_of(processor)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def generate(self, samples: Sequence[Sample], params: SamplingParams, group_sizes: Sequence[int] | None = None,
                 *, prompts: PromptBatch | None = None) -> list[list[Completion]]:
        prompts = prompts if prompts is not None else self.engine.encode(samples)
        groups = self.engine.generate(samples, params, group_sizes, prompts=prompts)
        if not prompts.kept:
            return groups
        row_of = {index: row for row, index in enumerate(prompts.kept)}
        trajectories = [[_Trajectory(samples[i], row_of[i], completion) for completion in group] if group else []
                        for i, group in enumerate(groups)]
        rows: list[EncodedRow] = []  # each prompt on its own, made when a first call needs a next turn
        for _ in range(1, self.max_turns):
            calls = [(t, call) for group in trajectories for t in group if (call := self._call_of(t)) is not None]
            if not calls:
                break
            rows = rows or prompts.to("cpu").rows()
            with ThreadPoolExecutor(max_workers=min(len(calls), MAX_CONCURRENT_CALLS)) as pool:  # tools may wait
                results = list(pool.map(lambda item: run_call(item[1], self.tools, self.context_of(item[0].sample)),
                                        calls))
            for (trajectory, _), (observation, outcome) in zip(calls, results):
                self._observe(trajectory, observation, "images_dropped" if observation.images else outcome)
            self._next_turn([trajectory for trajectory, _ in calls], rows, prompts, params)
        return [[t.completion for t in group] for group in trajectories]

    def _call_of(self, trajectory: _Trajectory) -> ToolCall | None:
        """The call the trajectory's last turn ends with (its last ``<tool_call>``), if it may take another turn."""
        completion = trajectory.completion
        start = completion.observation_spans[-1][1] if completion.observation_spans else 0
        calls = find_calls(self.tokenizer.decode(completion.token_ids[start:], skip_special_tokens=True))
        if completion.truncated or not calls or trajectory.turns >= self.max_turns:
            return None
        return calls[-1]

    def _observe(self, trajectory: _Trajectory, observation: Observation, outcome: str) -> None:
        completion = trajectory.completion
        observed = self._observation_ids(observation.text)
        spans = [*completion.observation_spans, (len(completion.token_ids), len(completion.token_ids) + len(observed))]
        trajectory.completion = replace(
            completion, token_ids=[*completion.token_ids, *observed],
            logprobs=None if completion.logprobs is None else [*completion.logprobs, *[0.0] * len(observed)],
            observation_spans=spans, tool_outcomes=[*completion.tool_outcomes, outcome],
        )

    def _observation_ids(self, text: str) -> list[int]:
        """The tokens between the end of the policy's turn (its stop token) and the start of its next one: the
        tool turn holding ``text`` as the model's chat template renders it, then the assistant turn's opening.
        ``text`` is tokenized as plain text (a tool printing ``<|im_start|>user`` writes those characters, not a
        turn) and cut to ``max_observation_tokens``."""
        observed = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        if len(observed) > self.max_observation_tokens:
            cut = self.tokenizer(" [cut]", add_special_tokens=False)["input_ids"]
            observed = observed[: self.max_observation_tokens - len(cut)] + cut
        before, after = self._tool_turn_template
        return [*before, *observed, *after]

    @functools.cached_property
    def _tool_turn_template(self) -> tuple[list[int], list[int]]:
        """The tokens of the tool turn before and after its text, rendered once by the model's chat template."""
        conversation = [{"role": "user", "content": [{"type": "text", "text": ""}]},
                        {"role": "assistant", "content": [{"type": "text", "text": _MARK}]},
                        {"role": "tool", "content": [{"type": "text", "text": _OBSERVATION}]}]
        rendered = self.processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        after_turn = rendered.index(_MARK) + len(_MARK)
        stop = self.tokenizer.decode([self.tokenizer.eos_token_id]) if self.tokenizer.eos_token_id is not None else ""
        if stop and stop in rendered[after_turn:]:  # the policy's own stop token ends its turn
            after_turn = rendered.index(stop, after_turn) + len(stop)
        before, after = rendered[after_turn:].split(_OBSERVATION)
        return tuple(self.tokenizer(part, add_special_tokens=False)["input_ids"] for part in (before, after))

    def _next_turn(self, going: Sequence[_Trajectory], rows: Sequence[EncodedRow], prompts: PromptBatch,
                   params: SamplingParams) -> None:
        """One more policy turn of each trajectory in ``going``, decoded after its prompt and trajectory so far."""
        extended = [_extended(rows[t.row], t.completion.token_ids) for t in going]
        batch = batch_from_rows(extended, family=prompts.family, sample_ids=[t.sample.id for t in going],
                                kept=list(range(len(going))), dropped=[], placeholder_ids=prompts.placeholder_ids,
                                pad_token_id=prompts.pad_token_id)
        turns = self.engine.generate([t.sample for t in going], replace(params, n=1), [1] * len(going),
                                     prompts=batch.to(prompts.input_ids.device))
        for trajectory, (turn,) in zip(going, turns):
            done = trajectory.completion
            trajectory.completion = replace(
                done, text=f"{done.text}{turn.text}", token_ids=[*done.token_ids, *turn.token_ids],
                logprobs=None if done.logprobs is None or turn.logprobs is None else [*done.logprobs, *turn.logprobs],
                truncated=turn.truncated,
            )
            trajectory.turns += 1


def _extended(row: EncodedRow, suffix: Sequence[int]) -> EncodedRow:
    """``row`` with the trajectory's tokens after it (per-token extras zero for them: text tokens)."""
    tail = torch.tensor(list(suffix), dtype=row.input_ids.dtype)
    return EncodedRow(
        input_ids=torch.cat([row.input_ids, tail]),
        token_inputs={key: torch.cat([value, torch.zeros(len(tail), dtype=value.dtype)])
                      for key, value in row.token_inputs.items()},
        media_inputs=row.media_inputs, media_counts=row.media_counts,
    )
