"""Score completions with named, weighted reward functions; keep every component.

``total[i] = sum_k weight_k * component_k[i]`` over the components that apply to item
``i``: a ``None`` (not applicable) is left out of that item's sum, as in TRL. An item no
component applies to scores 0. A process reward's steps (see :mod:`tasks.reward_calls`)
stay out of the total: they go, weighted, to :attr:`RewardBreakdown.steps`, and the
component holds their mean for reports. A reward that fails on an item (raises, times out, returns
NaN/inf or a non-number) is ``None`` there under the default ``skip`` policy, and the
failure is reported in :attr:`RewardBreakdown.errors` (see :mod:`tasks.reward_calls`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from mmgrpo.types import Completion, Sample, Span
from tasks.reward_calls import CallResult, RewardCall, RewardError, RewardPolicy, run_reward_calls


@dataclass
class RewardBreakdown:
    """Weighted total per completion and each named component's raw values."""

    total: list[float]
    components: dict[str, list[float | None]]  # None: not applicable, or the reward failed there
    errors: list[RewardError] = field(default_factory=list)  # failures scored None (skip policy)
    steps: list[list[Span]] | None = None  # per completion: weighted process-reward steps; None: no process reward

    def means(self) -> dict[str, float]:
        """Mean of each component over the items it applies to (NaN if none), and of the total."""
        summary = {}
        for name, values in self.components.items():
            applicable = [value for value in values if value is not None]
            summary[name] = sum(applicable) / len(applicable) if applicable else math.nan
        summary["total"] = sum(self.total) / len(self.total) if self.total else math.nan
        return summary


def media_parts(sample: Sample) -> list[dict[str, Any]]:
    """The image/video/audio content parts of ``sample``'s messages, in order (what a VLM judge is shown)."""
    return [part for message in sample.messages if isinstance(message["content"], list)
            for part in message["content"] if part.get("type") in ("image", "video", "audio")]


def reward_fields(samples: Sequence[Sample]) -> dict[str, list[Any]]:
    """Keyword fields for reward functions: ``answer``, ``media`` (each sample's media content parts)
    and every ``extra`` key, one entry per sample.

    A key some samples lack (a batch mixing tasks) is ``None`` for those samples.
    """
    keys = dict.fromkeys(key for sample in samples for key in sample.extra)
    fields = {"answer": [sample.answer for sample in samples], "media": [media_parts(sample) for sample in samples]}
    fields.update({key: [sample.extra.get(key) for sample in samples] for key in keys if key != "answer"})
    fields.setdefault("problem", [None] * len(samples))
    return fields


def trajectory_fields(completions: Sequence[Completion]) -> dict[str, list[Any]]:
    """What multi-turn rollouts did, one entry per completion, as reward fields: ``tool_calls`` (the calls run,
    :attr:`~mmgrpo.types.Completion.tool_calls`), ``tool_outcomes`` (how each went) and ``turn_spans`` (each policy
    turn's ``(start, end)`` in the completion's text: one span for a single-turn completion)."""
    return {"tool_calls": [list(c.tool_calls) for c in completions],
            "tool_outcomes": [list(c.tool_outcomes) for c in completions],
            "turn_spans": [turn_spans(c.text, c.turn_text_ends) for c in completions]}


def turn_spans(text: str, turn_ends: Sequence[int]) -> list[tuple[int, int]]:
    """The policy turns of ``text`` as ``(start, end)`` spans, the turns ending at ``turn_ends`` then the last."""
    bounds = [0, *turn_ends, len(text)]
    return list(zip(bounds[:-1], bounds[1:]))


def score_completions(
    completions: Sequence[str],
    samples: Sequence[Sample],
    weights: Mapping[str, float],
    *,
    reward_options: Mapping[str, Mapping[str, Any]] | None = None,
    policy: RewardPolicy = RewardPolicy(),
    completion_fields: Mapping[str, Sequence[Any]] | None = None,
) -> RewardBreakdown:
    """Score ``completions[i]`` (a completion of ``samples[i]``) with every reward in ``weights``
    (``completion_fields``: more keyword fields, one entry per completion, e.g. ``tool_outcomes``).

    ``reward_options`` maps a reward name to extra keyword arguments for it (e.g.
    ``{"count_accuracy": {"guards": {"max_tokens": 2000}}}``). A reward with weight 0 is
    still computed and reported. ``policy`` sets the timeout, the worker threads and what
    a failing reward does (see :mod:`tasks.reward_calls`).
    """
    if len(completions) != len(samples):
        raise ValueError(f"{len(completions)} completions but {len(samples)} samples")
    return score_batches([(completions, samples)], weights, reward_options=reward_options, policy=policy,
                         completion_fields=None if completion_fields is None else [completion_fields])[0]


def score_batches(
    batches: Sequence[tuple[Sequence[str], Sequence[Sample]]],
    weights: Mapping[str, float],
    *,
    reward_options: Mapping[str, Mapping[str, Any]] | None = None,
    policy: RewardPolicy = RewardPolicy(),
    step_rule: str = "lines",
    completion_fields: Sequence[Mapping[str, Sequence[Any]]] | None = None,
) -> list[RewardBreakdown]:
    """:func:`score_completions` of each (completions, samples) batch, every reward call of
    every batch (e.g. of every group of a step) sharing one pool of ``policy.workers`` threads.
    ``step_rule`` places the per-step scores of process rewards (:mod:`tasks.steps`);
    ``completion_fields[b]`` are more keyword fields of batch b, one entry per completion (what a multi-turn
    rollout did: ``tool_outcomes``)."""
    reward_options = reward_options or {}
    unknown = set(reward_options) - set(weights)
    if unknown:
        raise ValueError(f"reward_options for reward(s) {sorted(unknown)} not in the weights {sorted(weights)}")
    calls = []
    for index, (completions, samples) in enumerate(batches):
        fields, sample_ids = reward_fields(samples), [sample.id for sample in samples]
        if completion_fields is not None:
            fields |= {key: list(values) for key, values in completion_fields[index].items()}
        calls += [RewardCall(name, list(completions), fields, sample_ids, dict(reward_options.get(name, {})),
                             step_rule=step_rule) for name in weights]
    results = iter(run_reward_calls(calls, policy))
    breakdowns = []
    for completions, _ in batches:
        called = {name: next(results) for name in weights}
        components = {name: result.values for name, result in called.items()}
        total = [
            sum(weights[name] * result.values[i] for name, result in called.items() if _outcome(result, i))
            for i in range(len(completions))
        ]
        errors = [error for result in called.values() for error in result.errors]
        breakdowns.append(RewardBreakdown(total=[float(v) for v in total], components=components, errors=errors,
                                          steps=_weighted_steps(called, weights, len(completions))))
    return breakdowns


def _outcome(result: CallResult, index: int) -> bool:
    """Whether ``result``'s value at ``index`` counts towards the total: a number, not the mean of steps."""
    return result.values[index] is not None and (result.steps is None or result.steps[index] is None)


def _weighted_steps(called: Mapping[str, CallResult], weights: Mapping[str, float], count: int) -> list[list[Span]] | None:
    """Each completion's steps of every process reward, scores times the reward's weight, by end."""
    process = {name: result.steps for name, result in called.items() if result.steps is not None}
    if not process:
        return None
    merged: list[list[Span]] = [[] for _ in range(count)]
    for name, steps in process.items():
        for index, spans in enumerate(steps):
            merged[index] += [(start, end, weights[name] * score) for start, end, score in spans or []]
    return [sorted(spans, key=lambda span: (span[1], span[0])) for spans in merged]
