"""Collect one training batch of scored groups: sample, score, filter (DAPO), assemble.

The rollout engine samples ``group_sizes[i]`` completions of prompt i; the task's
weighted reward functions score them; with dynamic sampling, groups whose rewards are
all equal are dropped and fresh prompts are drawn until the batch is full or the
resample budget is spent. Everything here is orchestration; the math is in
:mod:`mmgrpo.algos`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

import torch

from mmgrpo.algos import overlong_penalty
from mmgrpo.algos.filtering import informative_groups
from mmgrpo.models.batch import PromptBatch
from mmgrpo.rollout.base import RolloutEngine, SamplingParams
from mmgrpo.types import Completion, Sample
from tasks.scoring import RewardBreakdown, score_completions


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

    def successes(self) -> list[bool]:
        """Whether each completion got the task's accuracy (reward > 0.5 when the task has no metric)."""
        values = self.components.get(self.metric) or self.rewards
        return [value is not None and value > 0.5 for value in values]


@dataclass
class Rollouts:
    """The groups a GRPO step trains on, laid out group after group."""

    groups: list[Group]
    rounds: int = 1  # rollout rounds it took (> 1 only under dynamic sampling)
    dropped_prompts: int = 0  # over-long prompts the engine could not sample
    zero_variance_groups: int = 0  # groups whose rewards were all equal (before filtering)
    sampled_groups: int = 0  # groups sampled in all rounds
    filtered: list[Group] = field(default_factory=list)  # groups dropped by dynamic sampling

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

    def score(self, sample: Sample, completions: Sequence[Completion]) -> tuple[list[float], RewardBreakdown]:
        breakdown = score_completions(
            [c.text for c in completions], [sample] * len(completions), self.weights,
            reward_options=self.reward_options,
        )
        totals = torch.tensor(breakdown.total, dtype=torch.float32)  # [G]
        if self.overlong_buffer > 0:
            lengths = torch.tensor([len(c.token_ids) for c in completions])  # [G]
            totals = totals + overlong_penalty(
                lengths, self.max_new_tokens, self.overlong_buffer, self.overlong_penalty
            )
        return totals.tolist(), breakdown


def collect_rollouts(
    engine: RolloutEngine,
    encode: Callable[[list[Sample]], PromptBatch],
    next_samples: Callable[[int], list[Sample]],
    group_sizes_for: Callable[[list[Sample]], list[int]],
    scoring: Mapping[str, ScoringRule],
    params: SamplingParams,
    *,
    num_prompts: int,
    dynamic_sampling: bool = False,
    max_resample_rounds: int = 0,
) -> Rollouts:
    """Sample and score ``num_prompts`` groups (fewer if dynamic sampling runs out of rounds).

    ``scoring`` maps a task name to its rule: each group is scored by its sample's task.
    """
    result = Rollouts(groups=[], rounds=0)
    while True:
        samples = next_samples(num_prompts)
        sizes = group_sizes_for(samples)
        round_params = _with_seed(params, result.rounds)
        prompts = encode(samples)
        row_of = {index: row for row, index in enumerate(prompts.kept)}
        generated = engine.generate(samples, round_params, sizes, prompts=prompts)
        for index, (sample, completions) in enumerate(zip(samples, generated)):
            if not completions:
                result.dropped_prompts += 1
                continue
            rule = scoring[sample.task]
            rewards, breakdown = rule.score(sample, completions)
            group = Group(sample, completions, rewards, breakdown.components, rule.metric, prompts, row_of[index])
            result.sampled_groups += 1
            informative = bool(informative_groups(torch.tensor(rewards), [len(rewards)])[0])
            result.zero_variance_groups += not informative
            (result.groups if informative or not dynamic_sampling else result.filtered).append(group)
        result.rounds += 1
        full = len(result.groups) >= num_prompts
        if not dynamic_sampling or full or result.rounds > max_resample_rounds:
            break
    result.groups = result.groups[:num_prompts]
    return result


def _with_seed(params: SamplingParams, round_index: int) -> SamplingParams:
    """A distinct but reproducible seed for each resampling round of one step."""
    if params.seed is None or round_index == 0:
        return params
    return replace(params, seed=params.seed * 1000 + round_index)
