"""Collect one training batch of scored groups: sample, score, filter (DAPO), assemble.

The rollout engine samples ``group_sizes[i]`` completions of prompt i; the task's
weighted reward functions score them; with dynamic sampling, groups whose rewards are
all equal are dropped and fresh prompts are drawn until the batch is full or the
resample budget is spent. A prompt the batch builder leaves out (media that fail to
decode or resize, a prompt too long) is recorded in ``Rollouts.skipped`` and the step
goes on with the others. Everything here is orchestration; the math is in
:mod:`mmgrpo.algos`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Container, Mapping, Sequence

import torch

from mmgrpo.algos import overlong_penalty
from mmgrpo.algos.filtering import informative_groups
from mmgrpo.config import Config
from mmgrpo.models.batch import PromptBatch
from mmgrpo.rollout.base import RolloutEngine, SamplingParams
from mmgrpo.skipped_rows import SkippedRow
from mmgrpo.types import Completion, Sample, Span
from tasks.reward_calls import RewardError, RewardPolicy
from tasks.scoring import RewardBreakdown, score_batches, trajectory_fields


NO_COMPLETIONS = "no completions"  # skip reason of an encoded prompt the engine returned nothing for
IN_MEMORY_MEDIA = "<in memory>"  # a light sample's stand-in for media that are not a path or URL


@dataclass
class Group:
    """One prompt and its scored completions."""

    sample: Sample
    completions: list[Completion]
    rewards: list[float]  # weighted total (+ overlong penalty) per completion
    components: dict[str, list[float | None]]
    metric: str = ""  # the component that is the task's accuracy (e.g. count_accuracy)
    prompts: PromptBatch | None = None  # the encoded batch this group's prompt is a row of
    prompt_row: int = 0
    policy_version: int | None = None  # the policy (its step count) that sampled it; None: the current one
    steps: list[list[Span]] | None = None  # per completion: weighted process-reward steps; None: no process reward
    greedy_reward: float | None = None  # the reward of the prompt's greedy completion (ReMax's baseline); None: none

    def successes(self) -> list[bool]:
        """Whether each completion got the task's accuracy (reward > 0.5 when the task has no metric)."""
        values = self.components.get(self.metric) or self.rewards
        return [value is not None and value > 0.5 for value in values]


@dataclass
class Rollouts:
    """The groups a GRPO step trains on, laid out group after group."""

    groups: list[Group]
    rounds: int = 1  # rollout rounds it took (> 1 only under dynamic sampling)
    skipped: list[SkippedRow] = field(default_factory=list)  # prompts left out (bad media, too long), all rounds
    zero_variance_groups: int = 0  # groups whose rewards were all equal (before filtering)
    sampled_groups: int = 0  # groups sampled in all rounds
    filtered: list[Group] = field(default_factory=list)  # groups dropped by dynamic sampling
    reward_errors: list[RewardError] = field(default_factory=list)  # completions a reward failed on (all rounds)

    @property
    def dropped_prompts(self) -> int:
        """Prompts drawn but left out of the step (see ``skipped``)."""
        return len(self.skipped)

    @property
    def samples(self) -> list[Sample]:
        return [group.sample for group in self.groups]

    @property
    def group_sizes(self) -> list[int]:
        return [len(group.completions) for group in self.groups]

    @property
    def completions(self) -> list[Completion]:
        return [c for group in self.groups for c in group.completions]

    def rewards(self) -> torch.Tensor:
        return torch.tensor([r for group in self.groups for r in group.rewards], dtype=torch.float32)  # [N]

    def greedy_rewards(self) -> torch.Tensor:
        """Each group's greedy-completion reward ``[P]``, NaN where it has none."""
        return torch.tensor([math.nan if g.greedy_reward is None else g.greedy_reward for g in self.groups])

    def lengths(self) -> torch.Tensor:
        """Each completion's count of tokens the policy sampled ``[N]``."""
        return torch.tensor([c.policy_token_count for c in self.completions])

    def reward_components(self, weights: Mapping[str, Mapping[str, float]],
                          penalties: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The rewards each completion's total is made of ``[N, K]`` and their weights ``[N, K]``, ``weights``
        being each task's reward weights: every named reward of any task (0 where it does not apply or failed),
        then DAPO's overlong ``penalties`` ``[N]`` (if any) with weight 1. Process rewards are refused: their steps
        are not part of the total."""
        if any(group.steps is not None for group in self.groups):
            raise ValueError("advantage_estimator gdpo normalises the outcome rewards that make up the total; a "
                             "process reward (steps) is not one of them: use another estimator with process rewards")
        names = sorted({name for group in self.groups for name in weights[group.sample.task]
                        if name in group.components})
        values, factors = [], []
        for group in self.groups:
            task_weights = weights[group.sample.task]
            for i in range(len(group.completions)):
                values.append([(group.components[name][i] or 0.0) if name in group.components else 0.0
                               for name in names])
                factors.append([task_weights.get(name, 0.0) for name in names])
        components = torch.tensor(values, dtype=torch.float64).reshape(len(values), len(names))
        component_weights = torch.tensor(factors, dtype=torch.float64).reshape(len(values), len(names))
        if penalties is not None:
            components = torch.cat([components, penalties.to(torch.float64)[:, None]], dim=1)
            component_weights = torch.cat([component_weights, torch.ones(len(values), 1, dtype=torch.float64)], dim=1)
        return components, component_weights

    def step_rewards(self) -> list[list[Span]] | None:
        """Each completion's process-reward steps, group after group; None when no group has any."""
        if all(group.steps is None for group in self.groups):
            return None
        return [spans for group in self.groups for spans in (group.steps or [[] for _ in group.completions])]

    def summary(self) -> Rollouts:
        """What metrics, logs and other ranks need: groups without prompt tensors or media
        (each sample keeps its id, task and answer), small enough to send between ranks."""
        return replace(self, groups=[_light(g) for g in self.groups], filtered=[_light(g) for g in self.filtered])

    @classmethod
    def merged(cls, parts: Sequence[Rollouts]) -> Rollouts:
        """One step's rollouts of every rank, as one (groups in rank order)."""
        return cls(
            groups=[g for part in parts for g in part.groups],
            rounds=max(part.rounds for part in parts),
            skipped=[row for part in parts for row in part.skipped],
            zero_variance_groups=sum(part.zero_variance_groups for part in parts),
            sampled_groups=sum(part.sampled_groups for part in parts),
            filtered=[g for part in parts for g in part.filtered],
            reward_errors=[error for part in parts for error in part.reward_errors],
        )

    def absorb(self, part: Rollouts, *, dynamic_sampling: bool) -> None:
        """Add one round's groups (all of ``part.groups``, unfiltered): with ``dynamic_sampling``
        those whose rewards are all equal go to ``filtered`` instead of ``groups``."""
        self.rounds += 1
        self.skipped += part.skipped
        self.reward_errors += part.reward_errors
        for group in part.groups:
            informative = bool(informative_groups(torch.tensor(group.rewards), [len(group.rewards)])[0])
            self.sampled_groups += 1
            self.zero_variance_groups += not informative
            (self.groups if informative or not dynamic_sampling else self.filtered).append(group)

    def prompt_batch(self, encode: Callable[[list[Sample]], PromptBatch]) -> PromptBatch:
        """The groups' prompts, one row each: rows of the rollout's own encoding when they all
        come from one batch (no second pass through the processor), else encoded anew."""
        batches = {id(group.prompts) for group in self.groups}
        if len(batches) == 1 and self.groups[0].prompts is not None:
            return self.groups[0].prompts.select([group.prompt_row for group in self.groups])
        return encode(self.samples)


@dataclass(frozen=True)
class ScoringRule:
    """How completions become rewards: weighted task rewards plus DAPO's overlong penalty."""

    weights: dict[str, float]
    reward_options: dict[str, dict]
    max_new_tokens: int
    metric: str = ""  # the reward that is the task's accuracy
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    policy: RewardPolicy = RewardPolicy()  # timeout, worker threads, what a failing reward does
    step_rule: str = "lines"  # how process rewards' per-step scores are placed (tasks.steps)

    def score(self, sample: Sample, completions: Sequence[Completion]) -> tuple[list[float], RewardBreakdown]:
        return self.score_groups([(sample, completions)])[0]

    def score_groups(
        self, groups: Sequence[tuple[Sample, Sequence[Completion]]]
    ) -> list[tuple[list[float], RewardBreakdown]]:
        """Rewards of each group's completions; the reward calls of all groups run in one worker pool."""
        batches = [([c.text for c in completions], [sample] * len(completions)) for sample, completions in groups]
        trajectories = [trajectory_fields(completions) for _, completions in groups]
        breakdowns = score_batches(batches, self.weights, reward_options=self.reward_options, policy=self.policy,
                                   step_rule=self.step_rule, completion_fields=trajectories)
        return [self._with_penalty(completions, b) for (_, completions), b in zip(groups, breakdowns)]

    def _with_penalty(
        self, completions: Sequence[Completion], breakdown: RewardBreakdown
    ) -> tuple[list[float], RewardBreakdown]:
        totals = torch.tensor(breakdown.total, dtype=torch.float32)  # [G]
        if self.overlong_buffer > 0:
            lengths = torch.tensor([c.policy_token_count for c in completions])  # [G]
            totals = totals + overlong_penalty(
                lengths, self.max_new_tokens, self.overlong_buffer, self.overlong_penalty
            )
        return totals.tolist(), breakdown


def collect_rollouts(
    next_round: Callable[[int], Rollouts],
    *,
    num_prompts: int,
    dynamic_sampling: bool = False,
    max_resample_rounds: int = 0,
    all_ranks_full: Callable[[bool], bool] = bool,
) -> Rollouts:
    """``num_prompts`` scored groups (fewer if dynamic sampling runs out of rounds).

    ``next_round(round_index)`` gives one round of scored groups (:func:`sample_round` in
    this process, or a batch from an asynchronous rollout worker). Without dynamic sampling
    one round is the batch; with it, groups whose rewards are all equal are set aside and
    rounds follow until the batch is full or ``max_resample_rounds`` extra rounds are spent.
    Under data parallelism every rank collects its own ``num_prompts`` and resamples until
    ``all_ranks_full(full_here)``, so all ranks run the same rounds.
    """
    result = Rollouts(groups=[], rounds=0)
    while True:
        result.absorb(next_round(result.rounds), dynamic_sampling=dynamic_sampling)
        if not dynamic_sampling or result.rounds > max_resample_rounds:
            break
        if all_ranks_full(len(result.groups) >= num_prompts):
            break
    result.groups = result.groups[:num_prompts]
    return result


def needs_greedy_baseline(config: Config) -> bool:
    """Whether the advantage estimator compares each group with its prompt's greedy completion (ReMax)."""
    return config.algo.objective().advantage_estimator == "remax"


def sample_round(
    engine: RolloutEngine,
    prompts: PromptBatch,
    samples: Sequence[Sample],
    group_sizes: Sequence[int],
    scoring: Mapping[str, ScoringRule],
    params: SamplingParams,
    *,
    greedy_baseline: bool = False,
) -> Rollouts:
    """One round: ``group_sizes[i]`` completions of ``samples[i]`` (encoded as ``prompts``), each
    group scored by its sample's task; every group is in ``groups`` (filtering is the caller's). With
    ``greedy_baseline`` (ReMax) each prompt also gets one greedy completion, scored, never trained on."""
    row_of = {index: row for row, index in enumerate(prompts.kept)}
    generated = engine.generate(samples, params, group_sizes, prompts=prompts)
    sampled = [(i, sample, group) for i, (sample, group) in enumerate(zip(samples, generated)) if group]
    result = Rollouts(groups=[], skipped=[*prompts.dropped, *_without_completions(samples, generated, row_of)])
    scored = score_groups(scoring, [(sample, completions) for _, sample, completions in sampled])
    greedy = _greedy_rewards(engine, prompts, samples, scoring, params, result) if greedy_baseline else {}
    for (index, sample, completions), (rewards, breakdown) in zip(sampled, scored):
        result.reward_errors.extend(breakdown.errors)
        metric = scoring[sample.task].metric
        result.groups.append(Group(sample, completions, rewards, breakdown.components, metric, prompts, row_of[index],
                                   steps=breakdown.steps, greedy_reward=greedy.get(index)))
    return result


def _greedy_rewards(engine: RolloutEngine, prompts: PromptBatch, samples: Sequence[Sample],
                    scoring: Mapping[str, ScoringRule], params: SamplingParams, result: Rollouts) -> dict[int, float]:
    """The reward of each sample's greedy completion, by its index in ``samples`` (none where the engine gave
    none); their reward failures join ``result``'s."""
    greedy_params = replace(params, n=1, temperature=0.0)
    generated = engine.generate(samples, greedy_params, [1] * len(samples), prompts=prompts)
    decoded = [(i, sample, group) for i, (sample, group) in enumerate(zip(samples, generated)) if group]
    scored = score_groups(scoring, [(sample, completions) for _, sample, completions in decoded])
    rewards = {}
    for (index, _, _), (values, breakdown) in zip(decoded, scored):
        result.reward_errors.extend(breakdown.errors)
        rewards[index] = values[0]
    return rewards


def _light(group: Group) -> Group:
    messages = [{**message, "content": _light_content(message.get("content"))} for message in group.sample.messages]
    sample = Sample(id=group.sample.id, task=group.sample.task, messages=messages, answer=group.sample.answer)
    return replace(group, sample=sample, prompts=None, prompt_row=0)


def _light_content(content: Any) -> Any:
    """Message content with its text and its media references when they are paths or URLs; media held
    in memory (decoded images, arrays, bytes) become the placeholder ``IN_MEMORY_MEDIA``."""
    if not isinstance(content, list):
        return content
    light = []
    for part in content:
        kind = part.get("type")
        if kind in part and not isinstance(part[kind], str) and kind != "text":
            part = {**part, kind: IN_MEMORY_MEDIA}
        light.append(part)
    return light


def score_groups(
    scoring: Mapping[str, ScoringRule], groups: Sequence[tuple[Sample, Sequence[Completion]]]
) -> list[tuple[list[float], RewardBreakdown]]:
    """Each group scored by its sample's task rule (groups of one task share a worker pool), in order."""
    scored: list[tuple[list[float], RewardBreakdown] | None] = [None] * len(groups)
    for task in dict.fromkeys(sample.task for sample, _ in groups):
        indices = [i for i, (sample, _) in enumerate(groups) if sample.task == task]
        for i, outcome in zip(indices, scoring[task].score_groups([groups[i] for i in indices])):
            scored[i] = outcome
    return scored


def rank_advantages(
    parts: Sequence[Rollouts], rank: int, advantages_of: Callable[[Rollouts], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The advantages of every rank's completions ``[N_all]`` (``parts`` in rank order), computed once
    over all of them, and this ``rank``'s slice ``[N_rank]``. Over all ranks, so that a batch-level
    statistic (``algo.scale: batch``: the std of the whole step's rewards) is the whole step's, as
    one process computes it, not each rank's own."""
    everything = advantages_of(Rollouts.merged(parts))
    counts = [len(part.completions) for part in parts]
    start = sum(counts[:rank])
    return everything, everything[start : start + counts[rank]]


def draw_usable(take: Callable[[int], list[int]], count: int, unusable: Container[int]) -> list[int]:
    """``count`` indices from ``take`` (a sampler's draw), passing over the ``unusable`` ones.

    Samples the batch builder skipped once are never drawn again; with none, this is
    exactly ``take(count)``. The caller ensures that some index is usable.
    """
    drawn: list[int] = []
    while len(drawn) < count:
        drawn += [index for index in take(count - len(drawn)) if index not in unusable]
    return drawn


def _without_completions(
    samples: Sequence[Sample], generated: Sequence[Sequence[Completion]], row_of: Mapping[int, int]
) -> list[SkippedRow]:
    """Encoded samples the engine nonetheless returned nothing for (those left out are in ``dropped``)."""
    return [
        SkippedRow(sample.id, sample.task, NO_COMPLETIONS, "the rollout engine returned none")
        for index, (sample, group) in enumerate(zip(samples, generated))
        if not group and index in row_of
    ]


def with_round_seed(params: SamplingParams, round_index: int) -> SamplingParams:
    """A distinct but reproducible seed for each resampling round of one step."""
    if params.seed is None or round_index == 0:
        return params
    return replace(params, seed=params.seed * 1000 + round_index)
