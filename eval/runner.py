"""``evaluate_policy``: sample completions of eval prompts from a rollout engine and score them.

It talks only to the :class:`~mmgrpo.rollout.base.RolloutEngine` interface the trainer
uses, so it evaluates whatever the engine samples from (the live policy mid-training, a
loaded checkpoint, a vLLM engine). Prompts go in batches of ``options.batch_size``. An
engine that encodes in process (it has ``encode(samples) -> PromptBatch``, as the HF
engine does) has each batch encoded first, so an item it cannot take (media that fail to
decode, a prompt too long) is skipped with the batch builder's reason and the batch goes on.
Under several ranks the items are split between them; with a journal, an interrupted evaluation
resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from eval.progress import Progress
from eval.resume import Outcome, PartJournal
from eval.results import FORMAT_REWARD, CompletionRecord, EvalOptions, EvalResult, ItemRecord, json_safe
from eval.shards import gathered, shard, slowest
from mmgrpo.distributed import Ranks
from mmgrpo.rollout.base import RolloutEngine, generate_or_skip
from mmgrpo.rollout.lockstep import in_lockstep
from mmgrpo.rollout.tool_metrics import ToolUse
from mmgrpo.skipped_rows import SkippedRow
from mmgrpo.types import Completion, Sample
from processors import VideoSpan
from tasks import Task, score_completions
from tasks.scoring import trajectory_fields
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
    ranks: Ranks = Ranks(),
    journal: PartJournal | None = None,
    label: str = "eval",
) -> EvalResult:
    """Generate ``options.samples`` completions per sample and score each with its task (or, for a
    benchmark, the :data:`ItemScorer` given under its name).

    ``skipped`` are rows the data layer already left out; they are carried into the
    result and counted. An item the batch builder leaves out (bad media, prompt over
    ``max_prompt_len``) or the engine returns nothing for is skipped and counted with its
    reason too, never scored as a failure. More than 10% of a task's completions cut at
    ``options.max_new_tokens`` is a logged warning (also in the report).

    On several ``ranks`` each scores its block of the items and every rank returns the whole result,
    in item order (:mod:`eval.shards`); items ``journal`` holds are not scored again, the others are
    appended to it (:mod:`eval.resume`). ``label`` names the evaluation in the progress bar and log.
    """
    missing = sorted({sample.task for sample in samples} - set(tasks))
    if missing:
        raise KeyError(f"no Task given for task(s) {missing}; tasks given: {sorted(tasks)}")
    started = time.perf_counter()
    generation_seconds = 0.0
    done = journal.done(samples) if journal is not None else {}
    pending = [index for index in range(len(samples)) if index not in done]
    batches = list(_batches(shard(pending, ranks), options.batch_size))
    rounds = _busiest_batches(len(pending), ranks, options.batch_size) if engine.lockstep else len(batches)
    engine = in_lockstep(engine, [samples[index] for index in pending])  # a rank with no batch decodes a stand-in
    outcomes: dict[int, Outcome] = {}
    bar_label = label if ranks.world_size == 1 else f"{label} (rank 0's block of {ranks.world_size})"
    with Progress(sum(map(len, batches)), bar_label, bar=options.progress, log=ranks.is_main_process) as progress:
        for batch_index in range(rounds):
            indices = batches[batch_index] if batch_index < len(batches) else []
            batch = [samples[index] for index in indices]
            generate_started = time.perf_counter()
            groups, left_out = generate_or_skip(engine, batch, options.sampling_params(batch_index)) \
                if batch or engine.lockstep else ([], [])
            generation_seconds += time.perf_counter() - generate_started
            scored = _batch_outcomes(indices, batch, groups, left_out, tasks, reward_policy)
            if journal is not None:
                journal.record(scored, samples)
            outcomes |= scored
            progress.update(len(batch))
    total_seconds = time.perf_counter() - started
    timings = slowest({
        "generation_seconds": generation_seconds,
        "scoring_seconds": total_seconds - generation_seconds,
        "total_seconds": total_seconds,
    }, ranks)
    every = gathered(outcomes, ranks) | done
    ordered = [every[index] for index in sorted(every)]
    items = [outcome for outcome in ordered if isinstance(outcome, ItemRecord)]
    dropped = [outcome for outcome in ordered if not isinstance(outcome, ItemRecord)]
    result = EvalResult(options=options, items=items, skipped=[*skipped, *dropped], timings=timings)
    if ranks.is_main_process:
        for line in result.truncation_warnings():
            logger.warning("%s", line)
    return result


def _batch_outcomes(
    indices: Sequence[int], batch: Sequence[Sample], groups: Sequence[tuple[Sample, list[Completion]]],
    left_out: Sequence[SkippedRow], tasks: Mapping[str, Task | ItemScorer], policy: RewardPolicy,
) -> dict[int, Outcome]:
    """Index -> scored record (or the row left out) of each item of one batch; ``groups`` and ``left_out``
    keep the batch's order, as ``generate_or_skip`` returns them."""
    answered = {id(sample): group for sample, group in groups}
    reasons = iter(left_out)
    return {
        index: _score(sample, answered[id(sample)], tasks[sample.task], policy) if id(sample) in answered
        else next(reasons)
        for index, sample in zip(indices, batch)
    }


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
        texts, [sample] * len(texts), weights, reward_options=task.reward_options(weights), policy=policy,
        completion_fields=trajectory_fields(completions),
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
            **CompletionRecord.tool_fields(ToolUse.of(completion)),
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
    label); a video window as its video's label and ``#t=<start>,<end>``; other in-memory media as ``<TypeName>``."""
    if isinstance(ref, (str, os.PathLike)):
        return os.fspath(ref)
    if isinstance(ref, VideoSpan):
        return f"{media_label(ref.video)}{ref.fragment}"
    if isinstance(ref, (bytes, bytearray)):
        return f"<bytes sha256:{hashlib.sha256(ref).hexdigest()[:16]}>"
    return f"<{type(ref).__name__}>"


def _busiest_batches(items: int, ranks: Ranks, batch_size: int) -> int:
    """The batches of the rank with the largest block of ``items`` (:func:`~eval.shards.shard`)."""
    largest = -(-items // ranks.world_size)
    return -(-largest // batch_size)


def _batches(indices: Sequence[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(indices), size):
        yield list(indices[start : start + size])
