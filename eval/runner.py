"""``evaluate_policy``: sample completions of eval prompts from a rollout engine and score them.

It talks only to the :class:`~mmgrpo.rollout.base.RolloutEngine` interface the trainer
uses, so it evaluates whatever the engine samples from (the live policy mid-training, a
loaded checkpoint, a vLLM engine). Prompts go in batches of ``options.batch_size``. An
engine that encodes in process (it has ``encode(samples) -> PromptBatch``, as the HF
engine does) has each batch encoded first, so an item it cannot take (media that fail to
decode, a prompt too long) is skipped with the batch builder's reason and the batch goes on.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

from eval.results import FORMAT_REWARD, CompletionRecord, EvalOptions, EvalResult, ItemRecord, json_safe
from mmgrpo.rollout.base import RolloutEngine, generate_or_skip
from mmgrpo.skipped_rows import SkippedRow
from mmgrpo.types import Completion, Sample
from tasks import Task, score_completions
from tasks.reward_calls import RewardPolicy
from tasks.base import MEDIA_KINDS

logger = logging.getLogger(__name__)

ItemScorer = Callable[[Sample, Sequence[Completion]], ItemRecord]
"""Scores one prompt's completions its own way (a benchmark's official scorer) instead of a task's rewards."""


def evaluate_policy(
    engine: RolloutEngine,
    samples: Sequence[Sample],
    tasks: Mapping[str, Task | ItemScorer],
    options: EvalOptions,
    *,
    skipped: Sequence[SkippedRow] = (),
    reward_policy: RewardPolicy = RewardPolicy(),
) -> EvalResult:
    """Generate ``options.samples`` completions per sample and score each with its task (or, for a
    benchmark, the :data:`ItemScorer` given under its name).

    ``skipped`` are rows the data layer already left out; they are carried into the
    result and counted. An item the batch builder leaves out (bad media, prompt over
    ``max_prompt_len``) or the engine returns nothing for is skipped and counted with its
    reason too, never scored as a failure. More than 10% of a task's completions cut at
    ``options.max_new_tokens`` is a logged warning (also in the report).
    """
    missing = sorted({sample.task for sample in samples} - set(tasks))
    if missing:
        raise KeyError(f"no Task given for task(s) {missing}; tasks given: {sorted(tasks)}")
    started = time.perf_counter()
    generation_seconds = 0.0
    items: list[ItemRecord] = []
    dropped: list[SkippedRow] = []
    with tqdm(total=len(samples), desc="eval", unit="prompt", disable=not options.progress) as bar:
        for batch_index, batch in enumerate(_batches(samples, options.batch_size)):
            generate_started = time.perf_counter()
            groups, left_out = generate_or_skip(engine, batch, options.sampling_params(batch_index))
            generation_seconds += time.perf_counter() - generate_started
            items += [_score(sample, group, tasks[sample.task], reward_policy) for sample, group in groups]
            dropped += left_out
            bar.update(len(batch))
    total_seconds = time.perf_counter() - started
    timings = {
        "generation_seconds": generation_seconds,
        "scoring_seconds": total_seconds - generation_seconds,
        "total_seconds": total_seconds,
    }
    result = EvalResult(options=options, items=items, skipped=[*skipped, *dropped], timings=timings)
    for line in result.truncation_warnings():
        logger.warning("%s", line)
    return result


def _score(sample: Sample, group: Sequence[Completion], judge: Task | ItemScorer, policy: RewardPolicy) -> ItemRecord:
    return score_item(sample, group, judge, policy=policy) if isinstance(judge, Task) else judge(sample, group)


def score_item(
    sample: Sample, completions: Sequence[Completion], task: Task, *, policy: RewardPolicy = RewardPolicy()
) -> ItemRecord:
    """Score one prompt's completions with the task's rewards (plus ``format``) and its metric;
    a reward that fails under ``policy`` scores None there and is named in ``reward_errors``."""
    weights = {FORMAT_REWARD: 0.0} | task.default_rewards  # format is always reported, weighted only if the task says
    texts = [completion.text for completion in completions]
    breakdown = score_completions(
        texts, [sample] * len(texts), weights, reward_options=task.reward_options(weights), policy=policy
    )
    # The metric is one of the task's rewards: read from the breakdown, not computed twice.
    metrics = breakdown.components.get(task.metric_reward) or [task.metric(text, sample) for text in texts]
    records = [
        CompletionRecord(
            text=completion.text,
            n_tokens=len(completion.token_ids),
            truncated=completion.truncated,
            metric=float(metrics[index] or 0.0),  # None: the reward failed on it (skipped and counted)
            parsed_answer=json_safe(task.parse_answer(completion.text)),
            rewards={name: values[index] for name, values in breakdown.components.items()},
            reward=breakdown.total[index],
        )
        for index, completion in enumerate(completions)
    ]
    return ItemRecord(
        sample_id=sample.id,
        task=sample.task,
        answer=json_safe(sample.answer),
        media=[media_label(ref) for kind in MEDIA_KINDS for ref in sample.media(kind)],
        prompt=sample.user_text(),
        completions=records,
        reward_errors=[error.to_dict() for error in breakdown.errors],
    )


def media_label(ref: Any) -> str:
    """A printable media reference: the path; embedded bytes as ``<bytes sha256:...>`` (the same image, the same
    label); other in-memory media as ``<TypeName>``."""
    if isinstance(ref, (str, os.PathLike)):
        return os.fspath(ref)
    if isinstance(ref, (bytes, bytearray)):
        return f"<bytes sha256:{hashlib.sha256(ref).hexdigest()[:16]}>"
    return f"<{type(ref).__name__}>"


def _batches(samples: Sequence[Sample], size: int) -> Iterator[list[Sample]]:
    for start in range(0, len(samples), size):
        yield list(samples[start : start + size])
