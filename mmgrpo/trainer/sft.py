"""Supervised fine-tuning with a completion-only loss: the cold start of the DeepSeek-R1 pipeline.

Examples are (prompt sample, target completion) pairs: either a task's reference
completions (the formatted ground truth) or an SFT file such as ``mmgrpo reject`` writes
(JSON lines with ``messages`` and ``completion``). Only completion tokens (plus the
end-of-turn token, so the model learns to stop) contribute to the loss. Like GRPO, SFT
stops cleanly: a stop request or an error saves its last finished step as a checkpoint,
from which :func:`run_sft` continues exactly. An example the
batch builder leaves out (media that fail to decode, a prompt over ``max_prompt_len``) is
recorded in the skip ledger, never drawn again, and the step trains on the others.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import torch
from tqdm.auto import tqdm

from mmgrpo.config import SFTConfig
from mmgrpo.models.adapters import unwrap_model
from mmgrpo.models.batch import MediaBudgets, PromptBatch, build_prompt_batch
from mmgrpo.models.prompt_cache import PromptCache, hit_rate_metrics
from mmgrpo.models.shared_prefix import completion_logprobs
from mmgrpo.models.special_tokens import tokenizer_of
from mmgrpo.trainer.checkpoint import (
    TrainerState, capture_rng_state, checkpoint_on_failure, load_trainer_state, restore_rng_state, save_checkpoint,
    save_last_finished,
)
from mmgrpo.trainer.interrupts import signals_deferred
from mmgrpo.trainer.metrics import MetricsLogger
from mmgrpo.trainer.nonfinite import blamed_on, naming_rows, require_finite
from mmgrpo.skipped_rows import SkipLedger, SkippedRow, describe_skipped
from mmgrpo.distributed import Ranks
from mmgrpo.trainer.backends import OptimizerSpec, SingleProcessBackend, TrainingBackend, forward_lockstep
from mmgrpo.trainer.update import build_loss_mask
from mmgrpo.types import Completion, Sample
from tasks.base import Task, function_schemas

if TYPE_CHECKING:
    from mmgrpo.inputs import SampleSet

logger = logging.getLogger(__name__)


@dataclass
class SFTExample:
    """A prompt and the completion the model should learn to produce for it."""

    sample: Sample
    completion: str
    tool_turns: tuple[str, ...] = ()
    """A demonstration that calls tools: the policy's turns, the tools run between them
    (:mod:`mmgrpo.trainer.demonstrations`); empty: ``completion`` is the one turn."""


Demonstrate = Callable[[Sequence[SFTExample]], list[Completion | None]]
"""Tool demonstrations -> their trajectories (None where the prompt did not encode)."""


def reference_examples(samples: Sequence[Sample], tasks: dict[str, Task]) -> list[SFTExample]:
    """Each sample paired with its task's reference completion (its turns, when the task demonstrates tools)."""
    examples = []
    for sample in samples:
        turns = tuple(tasks[sample.task].reference_turns(sample))
        examples.append(SFTExample(sample, "".join(turns), turns if len(turns) > 1 else ()))
    return examples


def sft_examples(files: Sequence[str | Path], train_set: SampleSet | None) -> list[SFTExample]:
    """Examples from SFT files when any are given, else the reference completions of ``train_set``."""
    if files:
        return [example for path in files for example in load_sft_file(path)]
    if train_set is None:
        raise ValueError("SFT needs data files or a training set")
    return reference_examples(train_set.samples, train_set.tasks)


def load_sft_file(path: str | Path) -> list[SFTExample]:
    """Examples from a JSON-lines file with ``id``, ``task``, ``messages``, ``completion`` per row (and the ``tools``
    whose schemas its prompt held, as ``mmgrpo reject`` writes them)."""
    examples = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = [key for key in ("messages", "completion") if key not in row]
        if missing:
            raise ValueError(f"{path}, line {number}: missing field(s) {', '.join(missing)}")
        try:
            tools = function_schemas(row["tools"]) if row.get("tools") else []
        except ValueError as error:
            raise ValueError(f"{path}, line {number}: field tools: {error}") from None
        sample = Sample(
            id=str(row.get("id", number)), task=row.get("task", ""), messages=row["messages"],
            answer=row.get("answer"), extra=row.get("extra", {}), tools=tools,
        )
        examples.append(SFTExample(sample, row["completion"]))
    return examples


def completion_token_ids(processor: Any, model: torch.nn.Module, completions: Sequence[str]) -> list[list[int]]:
    """Token ids of each completion followed by the end-of-turn token."""
    tokenizer = tokenizer_of(processor)
    return [tokenizer(text, add_special_tokens=False).input_ids + [end_of_turn(model)] for text in completions]


def end_of_turn(model: torch.nn.Module) -> int:
    """The token that ends the model's turn (its first end-of-sequence token)."""
    eos = unwrap_model(model).generation_config.eos_token_id
    return eos[0] if isinstance(eos, list) else eos


def sft_targets(processor: Any, model: torch.nn.Module, batch: Sequence[SFTExample],
                demonstrate: Demonstrate | None) -> list[Completion]:
    """What each example trains on: its completion then the end-of-turn token, or its tool demonstration's
    trajectory (tool tokens masked; an empty target where its prompt did not encode, left out with it)."""
    plain = [i for i, example in enumerate(batch) if not example.tool_turns]
    targets = [Completion("", []) for _ in batch]
    for i, ids in zip(plain, completion_token_ids(processor, model, [batch[i].completion for i in plain])):
        targets[i] = Completion(batch[i].completion, ids)
    demonstrations = [i for i in range(len(batch)) if batch[i].tool_turns]
    if demonstrations:
        if demonstrate is None:
            example = batch[demonstrations[0]]
            raise ValueError(f"the SFT example {example.sample.id!r} (task {example.sample.task!r}) demonstrates tool "
                             "calls: name the tools it calls in rollout.tools")
        for i, trajectory in zip(demonstrations, demonstrate([batch[i] for i in demonstrations])):
            targets[i] = trajectory or targets[i]
    return targets


def run_sft(
    model: torch.nn.Module,
    processor: Any,
    examples: Sequence[SFTExample],
    config: SFTConfig,
    *,
    budgets: MediaBudgets,
    seed: int,
    metrics: MetricsLogger | None = None,
    progress_bar: bool = True,
    max_prompt_len: int | None = None,
    skip_ledger: SkipLedger | None = None,
    checkpoints: SFTCheckpoints | None = None,
    resume_from: Path | None = None,
    cache: PromptCache | None = None,
    backend: TrainingBackend | None = None,
    demonstrate: Demonstrate | None = None,
) -> list[dict[str, float]]:
    """Train for ``config.steps`` optimizer steps of ``config.batch_size`` examples; returns per-step metrics.

    Examples left out by the batch builder go to ``skip_ledger`` (split "train"); a step
    with none left is skipped with a warning (no optimizer step).
    With ``checkpoints``, every ``checkpoints.every_n_steps`` steps are saved there as ``step-N``, and a stop request
    (Ctrl-C, SIGTERM) or an error inside a step saves the last finished step, then propagates. ``resume_from`` is
    such a checkpoint, whose weights ``model`` already holds: training continues from it exactly.
    ``cache`` is the preprocessing cache prompts are read from and stored in. ``demonstrate`` makes the
    trajectories of examples that call tools (:func:`mmgrpo.trainer.demonstrations.demonstrated`).

    ``backend``: the training back end prepared around ``model`` with :func:`sft_optimizer_spec` (default: one
    process). On several ranks every rank draws the same batch and trains on its contiguous share, the back end
    summing the ranks' gradients, so a step is the one-process step; every rank runs as many micro-batches as the
    busiest (under ZeRO-3 and FSDP2 each forward is a collective): a rank with fewer repeats one at weight zero. Every
    rank calls it with the same ``checkpoints`` (the main process writes); after an error on one rank no rank saves.
    """
    if not examples:
        raise ValueError("SFT needs at least one example")
    backend = backend or SingleProcessBackend(model, sft_optimizer_spec(config))
    ranks, scheduler = backend.ranks, backend.scheduler
    order = _ExampleOrder(len(examples), seed)
    done = _restore_sft(resume_from, backend, order) if resume_from is not None else 0
    progress = _SFTProgress(done, scheduler.last_epoch, order.state_dict(), capture_rng_state(), resume_from)
    family = unwrap_model(model).config.model_type
    history = []
    backend.model.train()
    with checkpoint_on_failure(_save_last_sft_step(checkpoints, backend, processor, progress)):
        steps = range(done + 1, config.steps + 1)
        for step in tqdm(steps, desc="SFT", initial=done, total=config.steps, disable=not progress_bar, dynamic_ncols=True):
            cache_before = cache.stats.snapshot() if cache is not None else None
            indices = order.take(config.batch_size)
            share = len(indices) // ranks.world_size
            batch = [examples[i] for i in indices[ranks.rank * share:(ranks.rank + 1) * share]]
            targets = sft_targets(processor, model, batch, demonstrate)
            parts, skipped = _encode_micro_batches(
                processor, batch, targets, config.micro_batch_size, budgets, family=family,
                max_prompt_len=max_prompt_len, cache=cache,
            )
            skipped = [row for rows in ranks.gather(skipped) for row in rows]  # every rank's, so orders stay alike
            if skipped:
                skipped_ids = {row.row_id for row in skipped}
                order.exclude(i for i in indices if examples[i].sample.id in skipped_ids)
                if skip_ledger is not None:
                    skip_ledger.add(skipped, split="train", stage="sft")
                logger.warning("SFT step %d: skipped %d example(s): %s", step, len(skipped), describe_skipped(skipped))
            passes = _Passes.agreed(parts, ranks)
            if not passes.total_tokens:
                logger.warning("SFT step %d: every example was skipped; no update this step", step)
                progress.finish(step, scheduler.last_epoch, order)
                continue
            if not parts:  # others train: this rank takes part at weight zero
                parts = _stand_in_part(processor, model, [examples[i] for i in indices], budgets, family=family,
                                       max_prompt_len=max_prompt_len, cache=cache)
            with naming_rows([example.sample for example in batch], stage="SFT", step=step):
                loss_here = _backward_parts(backend, parts, passes, config.micro_batch_size, config.padding_free)
                loss, lr = sum(ranks.gather(loss_here)) / passes.total_tokens, scheduler.get_last_lr()[0]
                with signals_deferred(), blamed_on([i for prompts, _ in parts for i in prompts.sample_ids]):
                    row = {"sft/loss": loss, "sft/grad_norm": backend.step(), "sft/lr": lr}  # update + record: one
                    row |= {f"sft/{key}": value for key, value in backend.precision_metrics().items()}
                    if cache_before is not None:
                        row |= hit_rate_metrics(cache.stats.since(cache_before), prefix="sft")
                    progress.finish(step, scheduler.last_epoch, order)
                    history.append(row)
                    if metrics is not None:
                        metrics.log(step, row)
                if checkpoints is not None and checkpoints.due(step, config.steps):
                    progress.saved = _save_sft_checkpoint(checkpoints, backend, processor, progress)
    backend.model.eval()
    return history


@dataclass(frozen=True)
class _Passes:
    """What the ranks agree on for one step: the micro-batches each runs (the busiest's count) and the completion
    tokens of the whole step (every rank's loss is a share of their token mean); ``own``: this rank's parts."""

    count: int
    total_tokens: int
    own: int

    @classmethod
    def agreed(cls, parts: Sequence[tuple[PromptBatch, list[Completion]]], ranks: Ranks) -> _Passes:
        tokens = sum(target.policy_token_count for _, targets in parts for target in targets)
        everyone = ranks.gather((len(parts), tokens))
        return cls(max(count for count, _ in everyone), sum(tokens for _, tokens in everyone), len(parts))


def _stand_in_part(
    processor: Any, model: torch.nn.Module, batch: Sequence[SFTExample], budgets: MediaBudgets, *, family: str,
    max_prompt_len: int | None, cache: PromptCache | None,
) -> list[tuple[PromptBatch, list[Completion]]]:
    """One micro-batch of the first example of the step's batch that encodes (another rank's), for a rank whose own
    examples were all left out: it runs the collectives the others run, at weight zero."""
    for example in batch:
        prompts = build_prompt_batch(processor, [example.sample], budgets, family=family, max_prompt_len=max_prompt_len,
                                     cache=cache)
        if prompts.kept:
            return [(prompts, sft_targets(processor, model, [replace(example, tool_turns=())], None))]
    raise ValueError("no example of the step's batch encodes, yet the ranks counted tokens")  # cannot happen


def _backward_parts(
    backend: TrainingBackend, parts: Sequence[tuple[PromptBatch, list[Completion]]], passes: _Passes,
    micro_batch_size: int, padding_free: bool,
) -> float:
    """Backward the completion-only loss (token mean over every rank's parts) of each part, then repeat the first at
    weight zero up to the agreed count; returns this rank's summed token loss. A part whose loss is not finite stops
    the step before its backward, naming its rows. ``padding_free``: a part's sequences packed into rows (one
    answer per prompt: nothing to share, so the plain path)."""
    model = backend.model
    device = next(model.parameters()).device
    loss_sum = 0.0
    for index in range(passes.count):
        prompts, part_targets = parts[index] if index < len(parts) else parts[0]
        weight = 1.0 if index < passes.own else 0.0
        media = [target.media for target in part_targets]
        logp, _ = completion_logprobs(
            model, prompts.to(device), [target.token_ids for target in part_targets], [1] * len(part_targets),
            micro_batch_size=micro_batch_size, media=media if any(m is not None for m in media) else None,
            group_shared_encoding=not padding_free, padding_free=padding_free, lockstep=forward_lockstep(backend),
        )  # [n, Tc]
        mask = build_loss_mask(part_targets, [True] * len(part_targets), pad_token_id=0)  # [n, Tc]: not the tools'
        token_nll = -(logp * mask.to(device)).sum()
        loss_sum += weight * require_finite("loss", float(token_nll.detach()), prompts.sample_ids)
        backend.backward(token_nll * (weight / passes.total_tokens))
    return loss_sum


def sft_optimizer_spec(config: SFTConfig) -> OptimizerSpec:
    """SFT's AdamW and schedule (its own learning rate and steps)."""
    return OptimizerSpec(
        lr=config.lr, weight_decay=config.weight_decay, total_steps=config.steps, schedule=config.lr_schedule,
        warmup_ratio=config.warmup_ratio, max_grad_norm=config.max_grad_norm, samples_per_step=config.batch_size,
    )


@dataclass(frozen=True)
class SFTCheckpoints:
    """Where SFT saves ``step-N`` checkpoints, how often (0: only when stopped) and how many it keeps."""

    root: Path
    every_n_steps: int = 0
    keep_last: int | None = 1

    def due(self, step: int, last_step: int) -> bool:
        """A periodic save after ``step`` (not after the last: the finished model supersedes it)."""
        return bool(self.every_n_steps) and step % self.every_n_steps == 0 and step < last_step


@dataclass
class _SFTProgress:
    """The last finished SFT step and what a checkpoint of it records besides weights and optimizer."""

    step: int
    optimizer_steps: int  # scheduler.last_epoch after it: moves with each optimizer step
    order: dict[str, Any]
    rng: dict[str, Any]
    saved: Path | None = None  # the checkpoint of ``step`` once saved

    def finish(self, step: int, optimizer_steps: int, order: _ExampleOrder) -> None:
        self.step, self.optimizer_steps, self.order, self.rng = step, optimizer_steps, order.state_dict(), capture_rng_state()
        self.saved = None


def _save_last_sft_step(
    checkpoints: SFTCheckpoints | None, backend: TrainingBackend, processor: Any, progress: _SFTProgress,
) -> Callable[[BaseException], None]:
    """The emergency save of SFT's last finished step (none without a checkpoint folder; on several ranks only on a
    stop request, which every rank gets: after an error on one the others are elsewhere)."""

    def save_last(failure: BaseException) -> None:
        if checkpoints is None or progress.saved is not None:
            return
        if backend.ranks.world_size > 1 and not isinstance(failure, KeyboardInterrupt):
            logger.error("rank %d failed during SFT step %d: no emergency checkpoint with %d ranks",
                         backend.ranks.rank, progress.step + 1, backend.ranks.world_size)
            return

        save_last_finished(
            failure, progress.step, lambda: _save_sft_checkpoint(checkpoints, backend, processor, progress),
            weights_intact=backend.scheduler.last_epoch == progress.optimizer_steps, phase="SFT step",
        )

    return save_last


def _save_sft_checkpoint(
    checkpoints: SFTCheckpoints, backend: TrainingBackend, processor: Any, progress: _SFTProgress,
) -> Path:
    """``step-N`` of the last finished step (every rank calls it: a sharded back end gathers)."""
    backend.zero_grad()
    state = TrainerState(step=progress.step, scheduler=backend.scheduler.state_dict(), data=progress.order)
    return save_checkpoint(checkpoints.root, backend.model, processor, state, keep_last=checkpoints.keep_last,
                           rng=progress.rng, backend=backend)


def _restore_sft(checkpoint: Path, backend: TrainingBackend, order: _ExampleOrder) -> int:
    """Load an SFT checkpoint's optimizer, schedule, example order and this rank's RNG (its weights are already
    loaded); returns its step."""
    state = load_trainer_state(checkpoint)
    backend.load_optimizer(checkpoint, state.optimizer)
    backend.scheduler.load_state_dict(state.scheduler)
    order.load_state_dict(state.data)
    restore_rng_state(state.rng_of(backend.ranks.rank, backend.ranks.world_size))
    logger.info("SFT resumed from %s after step %d", checkpoint, state.step)
    return state.step


def _encode_micro_batches(
    processor: Any, batch: Sequence[SFTExample], targets: Sequence[Completion], micro_batch_size: int,
    budgets: MediaBudgets, *, family: str, max_prompt_len: int | None, cache: PromptCache | None,
) -> tuple[list[tuple[PromptBatch, list[Completion]]], list[SkippedRow]]:
    """``batch`` encoded in micro-batches, each with the targets of its kept examples, and the
    examples the batch builder left out."""
    parts, skipped = [], []
    for start in range(0, len(batch), micro_batch_size):
        part = slice(start, start + micro_batch_size)
        prompts = build_prompt_batch(
            processor, [e.sample for e in batch[part]], budgets, family=family, max_prompt_len=max_prompt_len,
            cache=cache,
        )
        skipped += prompts.dropped
        if prompts.kept:
            parts.append((prompts, [targets[part][i] for i in prompts.kept]))
    return parts, skipped


class _ExampleOrder:
    """Seeded reshuffle each pass over the examples; excluded examples are passed over."""

    def __init__(self, count: int, seed: int) -> None:
        self.count, self.rng, self.queue = count, random.Random(seed), []
        self.excluded: set[int] = set()

    def exclude(self, indices: Iterable[int]) -> None:
        self.excluded.update(indices)
        if len(self.excluded) == self.count:
            raise ValueError("every SFT example was skipped (bad media or prompts too long)")

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "queue": list(self.queue), "excluded": sorted(self.excluded)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.queue, self.excluded = list(state["queue"]), set(state["excluded"])

    def take(self, size: int) -> list[int]:
        taken = []
        while len(taken) < size:
            if not self.queue:
                self.queue = list(range(self.count))
                self.rng.shuffle(self.queue)
            index = self.queue.pop()
            if index not in self.excluded:
                taken.append(index)
        return taken
