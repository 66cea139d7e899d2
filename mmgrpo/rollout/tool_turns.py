"""Multi-turn rollouts with tools: the policy calls a tool, reads its result, and goes on.

:class:`ToolTurns` wraps an engine. The first turn of each group is the engine's own (group-shared) sampling;
a turn that ends (a stop token) holding a ``<tool_call>`` gets the call run (:mod:`tasks.tools`) and its
observation appended as a ``tool`` turn rendered by the model's own chat template, followed by the assistant
turn's opening; the policy then samples its next turn from the prompt, its media and the trajectory so far,
up to ``max_turns`` turns. The trajectory is one :class:`~mmgrpo.types.Completion` whose
``observation_spans`` mark the tools' tokens (no loss on them) and ``tool_outcomes`` each call's outcome.

A tool's images (a ``zoom_in`` crop) come inside the tool turn, under the prompt's image budget, and the next
turns see them (:mod:`mmgrpo.models.inline_media`) where the model family takes media mid-sequence; elsewhere
their text alone is shown and the call counts as ``images_dropped``. The wrapped engine decodes from encoded prompt
batches (``hf``), or takes each next turn as token ids with the loaded media (``vllm``, ``vllm_server``: the
prompt's text tokenized unexpanded, each crop one placeholder token; the engine expands them and its prompt ids are
checked against the trajectory's). Where decoding is collective (``hf`` under ZeRO-3 or FSDP2) every rank takes as
many turns, a rank whose trajectories have all ended decoding a stand-in turn while another's go on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import torch
from PIL import Image

from mmgrpo.config import RolloutConfig
from mmgrpo.models.adapters import adapter_for, unwrap_model
from mmgrpo.models.batch import (
    EncodedRow, MediaBudgets, PreparedPrompt, PromptBatch, batch_from_rows, renders_bos,
)
from mmgrpo.models.inline_media import encode_inline, extended_row, joined
from mmgrpo.models.special_tokens import tokenizer_of
from mmgrpo.rollout.base import RolloutEngine, SamplingParams
from mmgrpo.types import Completion, InlineMedia, Sample
from processors import MediaError
from tasks.base import ModelInfo
from tasks.grounding import FAMILY_COORDINATES, OTHER_FAMILIES_COORDINATES
from tasks.tools import TOOLS, Observation, Tool, ToolCall, ToolContext, find_calls, run_call

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
                 context_of: Callable[[Sample], ToolContext], max_observation_tokens: int = 256,
                 budgets: MediaBudgets | None = None, all_ranks_done: Callable[[bool], bool] = bool,
                 max_trajectory_tokens: int | None = None) -> None:
        self.engine, self.processor, self.tools, self.max_turns = engine, processor, dict(tools), max_turns
        self.max_trajectory_tokens = max_trajectory_tokens  # after the prompt: the policy's and the tools' tokens
        self.all_ranks_done = all_ranks_done  # collective decoding: whether no rank has a trajectory going on
        self.max_observation_tokens = max_observation_tokens
        self.budgets = budgets or {}  # a tool's images are loaded under the prompt's image budget
        self._templates: dict[int, tuple[str, str]] = {}  # image count -> the tool turn's text around its own
        self._template_ids: dict[str, list[int]] = {}
        self.context_of = context_of
        self.tokenizer = tokenizer_of(processor)

    @classmethod
    def from_config(cls, engine: RolloutEngine, rollout: RolloutConfig, model: torch.nn.Module, processor: Any,
                    budgets: MediaBudgets, *, max_turns: int | None = None,
                    all_ranks_done: Callable[[bool], bool] = bool) -> ToolTurns:
        """``engine`` taking turns with the tools of ``rollout.tools`` (up to ``max_turns``, default
        ``rollout.max_turns``), the tools reading boxes in the model family's coordinates; ``all_ranks_done``
        where the engine's decoding is a collective of the ranks (every rank then takes as many turns)."""
        family = unwrap_model(model).config.model_type
        info = ModelInfo(family, budgets["image"], budgets["video"])
        coords = FAMILY_COORDINATES.get(family, OTHER_FAMILIES_COORDINATES)
        return cls(engine, processor, {name: TOOLS.get(name) for name in rollout.tools},
                   rollout.max_turns if max_turns is None else max_turns, lambda sample: ToolContext(sample, info, coords),
                   rollout.max_observation_tokens, budgets, all_ranks_done, rollout.max_trajectory_tokens)

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
            going = self._run_calls(calls, prompts.family)
            if self.all_ranks_done(not going):
                break
            rows = rows or prompts.to("cpu").rows()
            if going:
                self._next_turn(going, rows, prompts, params)
            else:  # another rank's trajectories go on, and decoding is collective: decode one, discarded
                stand_in = next(t for group in trajectories for t in group)
                self._next_turn([replace(stand_in)], rows, prompts, params)  # on a copy
        return [[t.completion for t in group] for group in trajectories]

    def _run_calls(self, calls: Sequence[tuple[_Trajectory, ToolCall]], family: str) -> list[_Trajectory]:
        """Run each call and append its result to its trajectory: those that go on to another turn. A result that
        would leave no room for one under ``max_trajectory_tokens`` is not shown: its trajectory ends there,
        truncated."""
        if not calls:
            return []
        with ThreadPoolExecutor(max_workers=min(len(calls), MAX_CONCURRENT_CALLS)) as pool:  # tools may wait
            results = list(pool.map(lambda item: run_call(item[1], self.tools, self.context_of(item[0].sample)), calls))
        going = []
        for (trajectory, call), (observation, outcome) in zip(calls, results):
            observed = self._observed(trajectory.completion, call, observation, outcome, family)
            if self._room(observed) > 0:
                trajectory.completion = observed
                going.append(trajectory)
            else:
                trajectory.completion = replace(trajectory.completion, truncated=True)
        return going

    def _room(self, completion: Completion) -> float:
        """Tokens the trajectory may still take under ``max_trajectory_tokens``."""
        budget = self.max_trajectory_tokens
        return float("inf") if budget is None else budget - len(completion.token_ids)

    def _call_of(self, trajectory: _Trajectory) -> ToolCall | None:
        """The call the trajectory's last turn ends with (its last ``<tool_call>``), if it may take another turn."""
        completion = trajectory.completion
        start = completion.observation_spans[-1][1] if completion.observation_spans else 0
        calls = find_calls(self.tokenizer.decode(completion.token_ids[start:], skip_special_tokens=True))
        if completion.truncated or not calls or trajectory.turns >= self.max_turns:
            return None
        return calls[-1]

    def _observed(self, completion: Completion, call: ToolCall, observation: Observation, outcome: str,
                  family: str) -> Completion:
        """``completion`` with the call's result appended as a tool turn."""
        offset = len(completion.token_ids)
        if observation.images and not adapter_for(family).inline_media:
            observation, outcome = replace(observation, images=()), "images_dropped"
        try:
            observed, media, media_start = self._observation_tokens(observation, family)
        except MediaError as error:  # a crop the image budget refuses (an absurd aspect ratio)
            observed, media, media_start = self._observation_tokens(
                Observation.failure(f"the image could not be shown: {error}"), family)
            outcome = "failed"
        return replace(
            completion, token_ids=[*completion.token_ids, *observed],
            logprobs=None if completion.logprobs is None else [*completion.logprobs, *[0.0] * len(observed)],
            observation_spans=[*completion.observation_spans, (offset, offset + len(observed))],
            tool_outcomes=[*completion.tool_outcomes, outcome], tool_calls=[*completion.tool_calls, call.as_record()],
            media=completion.media if media is None else joined(adapter_for(family), completion.media, media,
                                                                offset + media_start),
        )

    def _observation_tokens(self, observation: Observation, family: str) -> tuple[list[int], InlineMedia | None, int]:
        """The tokens between the end of the policy's turn (its stop token) and the start of its next one: the
        tool turn holding the observation as the model's chat template renders it (its text, then its images),
        then the assistant turn's opening; the images as media inside the completion (None without); and where
        among those tokens the media's per-token extras start (the template after the text, holding the images).
        The text is tokenized as plain text (a tool printing ``<|im_start|>user`` writes those characters, not a
        turn) and cut to ``max_observation_tokens``."""
        observed = self.tokenizer(observation.text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        if len(observed) > self.max_observation_tokens:
            cut = self.tokenizer(" [cut]", add_special_tokens=False)["input_ids"]
            observed = observed[: self.max_observation_tokens - len(cut)] + cut
        before, after = self._tool_turn_template(len(observation.images))
        leading = [*self._ids(before), *observed]
        if not observation.images:
            return [*leading, *self._ids(after)], None, len(leading)
        after_ids, media = encode_inline(self.processor, family, after, observation.images, self.budgets)
        return [*leading, *after_ids], media, len(leading)

    def _observation_ids(self, text: str) -> list[int]:
        """The tokens of a text-only tool turn holding ``text`` (see :meth:`_observation_tokens`)."""
        return self._observation_tokens(Observation(text=text), "")[0]

    def _ids(self, template_part: str) -> list[int]:
        if template_part not in self._template_ids:
            self._template_ids[template_part] = self.tokenizer(template_part, add_special_tokens=False)["input_ids"]
        return self._template_ids[template_part]

    def _tool_turn_template(self, images: int) -> tuple[str, str]:
        """The text of a tool turn with ``images`` images before and after its own text, as the model's chat
        template renders it (image placeholders not yet expanded), once per image count."""
        if images not in self._templates:
            self._templates[images] = self._rendered_tool_turn(images)
        return self._templates[images]

    def _rendered_tool_turn(self, images: int) -> tuple[str, str]:
        content = [{"type": "text", "text": _OBSERVATION}, *[{"type": "image"}] * images]
        conversation = [{"role": "user", "content": [{"type": "text", "text": ""}]},
                        {"role": "assistant", "content": [{"type": "text", "text": _MARK}]},
                        {"role": "tool", "content": content}]
        rendered = self.processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        after_turn = rendered.index(_MARK) + len(_MARK)
        stop = self.tokenizer.decode([self.tokenizer.eos_token_id]) if self.tokenizer.eos_token_id is not None else ""
        if stop and stop in rendered[after_turn:]:  # the policy's own stop token ends its turn
            after_turn = rendered.index(stop, after_turn) + len(stop)
        before, after = rendered[after_turn:].split(_OBSERVATION)
        return before, after

    def _next_turn(self, going: Sequence[_Trajectory], rows: Sequence[EncodedRow], prompts: PromptBatch,
                   params: SamplingParams) -> None:
        """One more policy turn of each trajectory in ``going``, decoded after its prompt and trajectory so far."""
        adapter = adapter_for(prompts.family)
        extended = [extended_row(adapter, rows[t.row], t.completion.token_ids, t.completion.media) for t in going]
        batch = batch_from_rows(extended, family=prompts.family, sample_ids=[t.sample.id for t in going],
                                kept=list(range(len(going))), dropped=[], placeholder_ids=prompts.placeholder_ids,
                                pad_token_id=prompts.pad_token_id)
        if self.engine.needs_loaded_media:  # vLLM: the trajectory as token ids, with the prompt's media and the crops
            texts = {row: prompts.prepared[row].text for row in {t.row for t in going}}
            special = not renders_bos(self.processor, list(texts.values()))  # as the engine has vLLM tokenize them
            prompt_ids = {row: self.tokenizer(text, add_special_tokens=special)["input_ids"]
                          for row, text in texts.items()}
            batch = replace(batch, prepared=[self._continuation(prompts, t, index, prompt_ids[t.row])
                                             for index, t in enumerate(going)])
        turns = self.engine.generate([t.sample for t in going], replace(params, n=1), [1] * len(going),
                                     prompts=batch.to(prompts.input_ids.device))
        for trajectory, (turn,) in zip(going, turns):
            done = trajectory.completion
            turn = self._within(turn, self._room(done))
            trajectory.completion = replace(
                done, text=f"{done.text}{turn.text}", turn_text_ends=[*done.turn_text_ends, len(done.text)],
                token_ids=[*done.token_ids, *turn.token_ids],
                logprobs=None if done.logprobs is None or turn.logprobs is None else [*done.logprobs, *turn.logprobs],
                truncated=turn.truncated,
            )
            trajectory.turns += 1

    def _within(self, turn: Completion, room: float) -> Completion:
        """``turn`` cut to its first ``room`` tokens (then truncated) when longer."""
        if len(turn.token_ids) <= room:
            return turn
        token_ids = turn.token_ids[: int(room)]
        return replace(turn, text=self.tokenizer.decode(token_ids, skip_special_tokens=True), token_ids=token_ids,
                       logprobs=None if turn.logprobs is None else turn.logprobs[: int(room)], truncated=True)

    def _continuation(self, prompts: PromptBatch, trajectory: _Trajectory, index: int,
                      prompt_ids: list[int]) -> PreparedPrompt:
        """``trajectory``'s next turn as an engine that loads media itself takes it: ``prompt_ids`` (the prompt's
        text tokenized as is, its placeholders not expanded), then the trajectory's tokens with each crop's
        placeholder run kept as one token (the engine expands both as the batch builder did), and the prompt's
        media, then the crops."""
        prompt, completion = prompts.prepared[trajectory.row], trajectory.completion
        placeholders = set(prompts.placeholder_ids.values())
        ids = list(prompt_ids)
        for position, token in enumerate(completion.token_ids):
            if not (token in placeholders and position and completion.token_ids[position - 1] == token):
                ids.append(token)
        crops = [Image.fromarray(image.numpy()) for image in completion.media.images] if completion.media else []
        media = {**prompt.media, "image": [*prompt.media.get("image", []), *crops]}
        return PreparedPrompt(index, trajectory.sample, "", media, tuple(ids))
