"""Rejection sampling (DeepSeek-R1): sample G completions per prompt, keep the best, write SFT data.

The output is a JSON-lines file that :func:`mmgrpo.trainer.sft.load_sft_file` (and so
``mmgrpo sft --data``) reads: one row per kept completion with the prompt ``messages``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from mmgrpo.rollout.base import RolloutEngine, SamplingParams, generate_or_skip
from mmgrpo.skipped_rows import SkippedRow
from mmgrpo.trainer.rollouts import ScoringRule, score_groups
from mmgrpo.types import Sample


@dataclass(frozen=True)
class RejectionRule:
    """Which completions survive: total reward >= ``threshold``, the best ``keep_per_prompt`` distinct ones."""

    threshold: float = 1.0
    keep_per_prompt: int = 1


def rejection_sample(
    engine: RolloutEngine,
    samples: Sequence[Sample],
    scoring: dict[str, ScoringRule],
    params: SamplingParams,
    rule: RejectionRule,
    *,
    batch_size: int = 32,
    progress_bar: bool = True,
) -> tuple[list[dict[str, Any]], list[SkippedRow]]:
    """Rows of accepted completions, best first within each prompt (``scoring`` is per task name),
    and the samples the engine could not take (bad media, prompt too long), each with why."""
    rows: list[dict[str, Any]] = []
    skipped: list[SkippedRow] = []
    for start in tqdm(range(0, len(samples), batch_size), desc="reject", disable=not progress_bar):
        groups, left_out = generate_or_skip(engine, list(samples[start : start + batch_size]), params)
        skipped += left_out
        for (sample, completions), (rewards, breakdown) in zip(groups, score_groups(scoring, groups)):
            ranked = sorted(range(len(completions)), key=lambda i: -rewards[i])
            seen: set[str] = set()
            for i in ranked:
                text = completions[i].text
                if rewards[i] < rule.threshold or text in seen or len(seen) >= rule.keep_per_prompt:
                    continue
                seen.add(text)
                components = {name: values[i] for name, values in breakdown.components.items()}
                rows.append({
                    "id": sample.id, "task": sample.task, "messages": sample.messages, "completion": text,
                    "reward": rewards[i], "rewards": components, "answer": sample.answer, "extra": sample.extra,
                    "tools": sample.tools,
                })
    return rows, skipped


def write_jsonl(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` as JSON lines (atomically: a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + ".partial")
    staging.write_text("".join(json.dumps(row, default=str) + "\n" for row in rows))
    staging.replace(path)
    return path
