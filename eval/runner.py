"""``evaluate_policy``: sample completions of eval prompts from a rollout engine and score them.

It talks only to the :class:`~mmgrpo.rollout.base.RolloutEngine` interface the trainer
uses, so it evaluates whatever the engine samples from (the live policy mid-training, a
loaded checkpoint, a vLLM engine). Prompts go in batches of ``options.batch_size``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

from data_recipes.loading import SkippedRow
from eval.results import FORMAT_REWARD, CompletionRecord, EvalOptions, EvalResult, ItemRecord, json_safe
from mmgrpo.rollout.base import RolloutEngine
from mmgrpo.types import Completion, Sample
from tasks import Task, score_completions
from tasks.base import MEDIA_KINDS

PROMPT_TOO_LONG = "prompt too long"  # skip reason of a prompt the engine dropped


def evaluate_policy(
    engine: RolloutEngine,
    samples: Sequence[Sample],
    tasks: Mapping[str, Task],
    options: EvalOptions,
    *,
    skipped: Sequence[SkippedRow] = (),
) -> EvalResult:
    """Generate ``options.samples`` completions per sample and score each with its task.

    ``skipped`` are rows the data layer already left out; they are carried into the
    result and counted. A prompt the engine drops (longer than its ``max_prompt_len``)
    is skipped and counted too, never scored as a failure.
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
            groups = engine.generate(batch, options.sampling_params(batch_index))
            generation_seconds += time.perf_counter() - generate_started
            for sample, group in zip(batch, groups):
                if group:
                    items.append(score_item(sample, group, tasks[sample.task]))
                else:
                    dropped.append(SkippedRow(sample.id, sample.task, PROMPT_TOO_LONG, "dropped by the rollout engine"))
            bar.update(len(batch))
    total_seconds = time.perf_counter() - started
    timings = {
        "generation_seconds": generation_seconds,
        "scoring_seconds": total_seconds - generation_seconds,
        "total_seconds": total_seconds,
    }
    return EvalResult(options=options, items=items, skipped=[*skipped, *dropped], timings=timings)


def score_item(sample: Sample, completions: Sequence[Completion], task: Task) -> ItemRecord:
    """Score one prompt's completions with the task's rewards (plus ``format``) and its metric."""
    weights = {FORMAT_REWARD: 0.0} | task.default_rewards  # format is always reported, weighted only if the task says
    texts = [completion.text for completion in completions]
    breakdown = score_completions(
        texts, [sample] * len(texts), weights, reward_options=task.reward_options(weights)
    )
    records = [
        CompletionRecord(
            text=completion.text,
            n_tokens=len(completion.token_ids),
            truncated=completion.truncated,
            metric=task.metric(completion.text, sample),
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
        completions=records,
    )


def media_label(ref: Any) -> str:
    """A printable media reference: the path, or ``<TypeName>`` for in-memory media."""
    return os.fspath(ref) if isinstance(ref, (str, os.PathLike)) else f"<{type(ref).__name__}>"


def _batches(samples: Sequence[Sample], size: int) -> Iterator[list[Sample]]:
    for start in range(0, len(samples), size):
        yield list(samples[start : start + size])
