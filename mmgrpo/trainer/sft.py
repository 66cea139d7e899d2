"""Supervised fine-tuning with a completion-only loss: the cold start of the DeepSeek-R1 pipeline.

Examples are (prompt sample, target completion) pairs: either a task's reference
completions (the formatted ground truth) or an SFT file such as ``mmgrpo reject`` writes
(JSON lines with ``messages`` and ``completion``). Only completion tokens (plus the
end-of-turn token, so the model learns to stop) contribute to the loss.
"""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch
from tqdm.auto import tqdm

from mmgrpo.config import SFTConfig
from mmgrpo.models.adapters import unwrap_model
from mmgrpo.models.batch import MediaBudgets, build_prompt_batch, pad_completions
from mmgrpo.models.shared_prefix import completion_logprobs
from mmgrpo.models.special_tokens import tokenizer_of
from mmgrpo.trainer.metrics import MetricsLogger
from mmgrpo.trainer.optim import build_optimizer, build_scheduler
from mmgrpo.types import Sample
from tasks.base import Task

if TYPE_CHECKING:
    from mmgrpo.trainer.setup import SampleSet

logger = logging.getLogger(__name__)


@dataclass
class SFTExample:
    """A prompt and the completion the model should learn to produce for it."""

    sample: Sample
    completion: str


def reference_examples(samples: Sequence[Sample], tasks: dict[str, Task]) -> list[SFTExample]:
    """Each sample paired with its task's reference completion."""
    return [SFTExample(s, tasks[s.task].reference_completion(s)) for s in samples]


def sft_examples(files: Sequence[str | Path], train_set: SampleSet | None) -> list[SFTExample]:
    """Examples from SFT files when any are given, else the reference completions of ``train_set``."""
    if files:
        return [example for path in files for example in load_sft_file(path)]
    if train_set is None:
        raise ValueError("SFT needs data files or a training set")
    return reference_examples(train_set.samples, train_set.tasks)


def load_sft_file(path: str | Path) -> list[SFTExample]:
    """Examples from a JSON-lines file with ``id``, ``task``, ``messages``, ``completion`` per row."""
    examples = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = [key for key in ("messages", "completion") if key not in row]
        if missing:
            raise ValueError(f"{path}, line {number}: missing field(s) {', '.join(missing)}")
        sample = Sample(
            id=str(row.get("id", number)), task=row.get("task", ""), messages=row["messages"],
            answer=row.get("answer"), extra=row.get("extra", {}),
        )
        examples.append(SFTExample(sample, row["completion"]))
    return examples


def completion_token_ids(processor: Any, model: torch.nn.Module, completions: Sequence[str]) -> list[list[int]]:
    """Token ids of each completion followed by the end-of-turn token."""
    tokenizer = tokenizer_of(processor)
    eos = unwrap_model(model).generation_config.eos_token_id
    end_of_turn = eos[0] if isinstance(eos, list) else eos
    return [tokenizer(text, add_special_tokens=False).input_ids + [end_of_turn] for text in completions]


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
) -> list[dict[str, float]]:
    """Train for ``config.steps`` optimizer steps of ``config.batch_size`` examples; returns per-step metrics."""
    if not examples:
        raise ValueError("SFT needs at least one example")
    optimizer = build_optimizer(model, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = build_scheduler(
        optimizer, total_steps=config.steps, warmup_ratio=config.warmup_ratio, schedule=config.lr_schedule
    )
    order = _ExampleOrder(len(examples), seed)
    device = next(model.parameters()).device
    family = unwrap_model(model).config.model_type
    history = []
    model.train()
    for step in tqdm(range(1, config.steps + 1), desc="SFT", disable=not progress_bar, dynamic_ncols=True):
        batch = [examples[i] for i in order.take(config.batch_size)]
        targets = completion_token_ids(processor, model, [example.completion for example in batch])
        total_tokens = sum(map(len, targets))
        loss_sum = 0.0
        for start in range(0, len(batch), config.micro_batch_size):
            part = slice(start, start + config.micro_batch_size)
            prompts = build_prompt_batch(processor, [e.sample for e in batch[part]], budgets, family=family)
            logp, _ = completion_logprobs(
                model, prompts.to(device), targets[part], [1] * len(targets[part]),
                micro_batch_size=config.micro_batch_size,
            )  # [n, Tc]
            _, mask = pad_completions(targets[part], pad_token_id=0)  # [n, Tc]
            token_nll = -(logp * mask.to(device)).sum()
            (token_nll / total_tokens).backward()
            loss_sum += float(token_nll.detach())
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in model.parameters() if p.requires_grad], config.max_grad_norm
        )
        row = {"sft/loss": loss_sum / total_tokens, "sft/grad_norm": float(grad_norm), "sft/lr": scheduler.get_last_lr()[0]}
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if not math.isfinite(row["sft/loss"]):
            raise FloatingPointError(f"SFT loss became {row['sft/loss']} at step {step}")
        history.append(row)
        if metrics is not None:
            metrics.log(step, row)
    model.eval()
    return history


class _ExampleOrder:
    """Seeded reshuffle each pass over the examples."""

    def __init__(self, count: int, seed: int) -> None:
        self.count, self.rng, self.queue = count, random.Random(seed), []

    def take(self, size: int) -> list[int]:
        taken = []
        while len(taken) < size:
            if not self.queue:
                self.queue = list(range(self.count))
                self.rng.shuffle(self.queue)
            taken.append(self.queue.pop())
        return taken
