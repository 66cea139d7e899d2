"""What an evaluation produced: per-item records and the numbers derived from them.

An :class:`EvalResult` keeps every completion with its score, so every summary number
can be recomputed from ``samples.jsonl``, and round-trips through JSON (the trainer
stores its evaluations and reloads them on resume).

Summary definitions (per task under ``"<task>/..."`` and over all items without prefix):

- ``accuracy``: mean task metric of each item's FIRST completion (the greedy one when
  decoding is greedy);
- ``pass@j`` (j = 1, 2, 4, ... and k, with k > 1 samples): mean over items of the unbiased
  estimator, a completion being correct when its metric reaches ``correct_threshold``;
- ``mean@k``: mean over items of the average metric of the k completions;
- ``format_rate`` (tasks), ``mean_length`` (tokens), ``truncation_rate``: over ALL completions
  (the format interval is over items, each an average of its k completions);
- ``reward/<name>``: mean over items of each reward's average over the item's completions
  (a reward that failed on a completion is left out of that average), e.g. ``reward/iou``,
  the mean IoU of a grounding task whose accuracy counts boxes with IoU above a threshold;
- ``notes/<note>`` (benchmarks): share of completions a benchmark read other than plainly: by its
  fallback where it found no answer (``random choice``: MMMU's seeded letter; ``closest option``:
  MathVista's nearest option text) or by a judge model (``judge-extracted``, ``eval.judge``);
- ``<benchmark>/<name>`` beyond these: what a benchmark reports of its own (``Benchmark.aggregate``:
  POPE's precision/recall/F1/yes-ratio per split, MME's acc, acc+ per subtask and its totals);
- ``n``: items evaluated; ``skipped``: rows left out (bad data, prompts too long);
- ``<metric>_ci_low`` / ``<metric>_ci_high``: the confidence interval of a mean.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_recipes.loading import SkippedRow
from eval import metrics
from mmgrpo.rollout.base import SamplingParams
from mmgrpo.rollout.tool_metrics import ToolUse, tool_metrics

FORMAT_REWARD = "format"  # the registered reward whose rate is reported as format_rate
TRUNCATION_WARNING = 0.1  # more than this share of completions at the token cap is warned about


@dataclass(frozen=True)
class EvalOptions:
    """How completions are sampled and how the statistics are computed."""

    samples: int = 1
    """Completions per item (k); > 1 reports pass@k and mean@k and needs temperature > 0."""
    temperature: float = 0.0
    """0 = greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 = off."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 = off."""
    batch_size: int = 64
    """Prompts per ``engine.generate`` call."""
    max_new_tokens: int = 256
    seed: int = 0
    """Sampling seed (batch i uses seed + i) and bootstrap seed: same seed, same numbers."""
    confidence: float = metrics.DEFAULT_CONFIDENCE
    bootstrap_resamples: int = metrics.DEFAULT_RESAMPLES
    correct_threshold: float = 1.0
    """A completion counts as correct (for pass@k) when its metric is at least this."""
    progress: bool = True
    """Show a tqdm progress bar."""

    def __post_init__(self) -> None:
        if self.samples < 1 or self.batch_size < 1 or self.max_new_tokens < 1:
            raise ValueError(f"samples, batch_size and max_new_tokens must be >= 1: {self}")
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(f"samples={self.samples} needs temperature > 0 (greedy decoding gives one answer)")

    def sampling_params(self, batch_index: int) -> SamplingParams:
        """Sampling parameters of the ``batch_index``-th generate call."""
        return SamplingParams(
            n=self.samples,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=self.max_new_tokens,
            seed=self.seed + batch_index,
        )


@dataclass
class CompletionRecord:
    """One scored completion."""

    text: str
    n_tokens: int
    truncated: bool
    metric: float
    """The task's eval metric (e.g. exact count, IoU > 0.5)."""
    parsed_answer: Any
    """What the completion answered, read leniently (JSON-safe), or None."""
    rewards: dict[str, float | None]
    """Each reward component of the task (plus ``format``), unweighted."""
    reward: float
    """The weighted total of the task's rewards."""
    extracted: Any = None
    """A benchmark's reading of the completion before normalisation (``parsed_answer`` is the normalised one)."""
    note: str = ""
    """How a benchmark read the answer when not plainly (e.g. ``random choice``)."""
    tool_outcomes: list[str] = field(default_factory=list)
    """How each tool call of a multi-turn completion went, in order (``rollout.tools``)."""
    tool_calls: list[str] = field(default_factory=list)
    """The tool each call named, in order (``?``: a call that could not be read)."""
    turns: int = 1
    """The policy's turns."""
    observation_tokens: int = 0
    """The tools' tokens inside the completion (not the policy's)."""
    tool_images: int = 0
    """The images the tools returned inside the completion."""

    def tool_use(self) -> ToolUse:
        return ToolUse(tuple(self.tool_calls), tuple(self.tool_outcomes), self.turns, self.observation_tokens,
                       self.tool_images)

    @staticmethod
    def tool_fields(use: ToolUse) -> dict[str, Any]:
        """The record's fields that hold ``use``."""
        return {"tool_outcomes": list(use.outcomes), "tool_calls": list(use.calls), "turns": use.turns,
                "observation_tokens": use.observation_tokens, "tool_images": use.images}


@dataclass
class ItemRecord:
    """One evaluated prompt and its k completions."""

    sample_id: str
    task: str
    answer: Any
    """Ground truth (JSON-safe)."""
    media: list[str]
    """Media references of the prompt (paths; in-memory media as ``<TypeName>``)."""
    completions: list[CompletionRecord]
    reward_errors: list[dict[str, Any]] = field(default_factory=list)
    """Rewards that failed on a completion (scored None there): reward, completion, kind, detail."""
    prompt: str = ""
    """The user's text of the prompt (its media are in ``media``)."""
    categories: dict[str, Any] = field(default_factory=dict)
    """A benchmark item's category labels (key -> label or list of labels), for per-category results."""

    def n_correct(self, threshold: float) -> int:
        return sum(completion.metric >= threshold for completion in self.completions)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ItemRecord:
        """The record ``dataclasses.asdict`` turned into ``data``."""
        return cls(**{**data, "completions": [CompletionRecord(**_with_tool_fields(c)) for c in data["completions"]]})


@dataclass
class EvalResult:
    """Every scored completion of one model on one evaluation set, plus skipped rows and timings."""

    options: EvalOptions
    items: list[ItemRecord]
    skipped: list[SkippedRow] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)
    """Task or benchmark -> the max_new_tokens its completions were generated under (when not ``options``')."""
    reported: dict[str, dict[str, float]] = field(default_factory=dict)
    """Benchmark -> the numbers it reports of its own beyond means of item scores (``Benchmark.aggregate``)."""

    @classmethod
    def merged(cls, parts: Sequence[EvalResult]) -> EvalResult:
        """One result holding every part's items, skipped rows and limits; timings summed."""
        timings: Counter[str] = Counter()
        for part in parts:
            timings.update(part.timings)
        return cls(
            options=parts[0].options,
            items=[item for part in parts for item in part.items],
            skipped=[row for part in parts for row in part.skipped],
            timings=dict(timings),
            limits={task: limit for part in parts for task, limit in part.limits.items()},
            reported={task: numbers for part in parts for task, numbers in part.reported.items()},
        )

    def limit_of(self, task: str) -> int:
        """The max_new_tokens ``task``'s completions were generated under."""
        return self.limits.get(task, self.options.max_new_tokens)

    def truncation_warnings(self, threshold: float = TRUNCATION_WARNING) -> list[str]:
        """One line per task or benchmark where more than ``threshold`` of completions stopped at the cap."""
        lines = []
        for task in self.tasks():
            completions = [c for item in self.items if item.task == task for c in item.completions]
            rate = metrics.mean([float(c.truncated) for c in completions])
            if rate > threshold:
                lines.append(
                    f"{task}: {rate:.0%} of completions stopped at the {self.limit_of(task)}-token cap "
                    f"(more than {threshold:.0%}); their answers may be cut off: raise eval.max_new_tokens"
                )
        return lines

    def by_category(self) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
        """Per task/benchmark, per category key, per label: ``n``, ``accuracy`` and its interval
        (first completions; an item with several labels of one key counts under each)."""
        with_ci = _interval_adder(self.options)
        table: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
        for item in self.items:
            for key, labels in item.categories.items():
                for label in labels if isinstance(labels, (list, tuple)) else [labels]:
                    table.setdefault(item.task, {}).setdefault(key, {}).setdefault(label, []).append(item)
        for keys in table.values():
            for labels in keys.values():
                for label, items in labels.items():
                    numbers: dict[str, float] = {"n": len(items)}
                    with_ci(numbers, "accuracy", [item.completions[0].metric for item in items])
                    labels[label] = numbers
        return table

    def tasks(self) -> list[str]:
        """Task names in first-seen order."""
        return list(dict.fromkeys(item.task for item in self.items))

    def summary(self) -> dict[str, float]:
        """All numbers (see the module docstring): overall, ``skipped``, then per task."""
        numbers = summarize_items(self.items, self.options)
        numbers["skipped"] = len(self.skipped)
        numbers["reward_errors"] = sum(len(item.reward_errors) for item in self.items)
        for task in self.tasks():
            task_items = [item for item in self.items if item.task == task]
            numbers |= {f"{task}/{key}": value for key, value in summarize_items(task_items, self.options).items()}
            numbers |= {f"{task}/{key}": value for key, value in self.reported.get(task, {}).items()}
        return numbers

    def skipped_by_reason(self) -> dict[str, int]:
        return dict(Counter(row.reason for row in self.skipped).most_common())

    def datasets(self) -> dict[str, dict[str, Any]]:
        """Per task: its item count and a hash of its item ids and answers (equal hash, same eval set)."""
        by_task: dict[str, list[ItemRecord]] = {task: [] for task in self.tasks()}
        for item in self.items:
            by_task[item.task].append(item)
        return {
            task: {"items": len(items), "fingerprint": _digest([(item.sample_id, item.answer) for item in items])}
            for task, items in by_task.items()
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data that :meth:`from_dict` turns back into an equal result."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        return cls(
            options=EvalOptions(**data["options"]),
            items=[ItemRecord.from_dict(item) for item in data["items"]],
            skipped=[SkippedRow(**row) for row in data.get("skipped", [])],
            timings=dict(data.get("timings", {})),
            limits=dict(data.get("limits", {})),
            reported={task: dict(numbers) for task, numbers in data.get("reported", {}).items()},
        )

    def write(self, out_dir: str | Path, model_name: str) -> dict[str, Path]:
        """Write results.json, report.md, samples.jsonl and the chart for this one model."""
        from eval.report import write_outputs

        return write_outputs(out_dir, {model_name: self})


def _with_tool_fields(record: dict[str, Any]) -> dict[str, Any]:
    """A completion record written before records kept their turns and the tools they called: those read from its
    calls' outcomes (one more turn per call; the tools unknown, ``?``)."""
    if "turns" in record:
        return record
    calls = len(record.get("tool_outcomes", []))
    return {**record, "turns": calls + 1, "tool_calls": ["?"] * calls}


def summarize_items(items: Sequence[ItemRecord], options: EvalOptions) -> dict[str, float]:
    """The summary numbers of ``items`` (no ``skipped``, no task prefix)."""
    completions = [completion for item in items for completion in item.completions]
    with_ci = _interval_adder(options)
    numbers: dict[str, float] = {"n": len(items)}
    with_ci(numbers, "accuracy", [item.completions[0].metric for item in items])
    if options.samples > 1:
        for k in metrics.pass_at_k_levels(options.samples):
            scores = [
                metrics.pass_at_k(len(item.completions), item.n_correct(options.correct_threshold), k)
                for item in items
            ]
            with_ci(numbers, f"pass@{k}", scores)
        item_means = [metrics.mean_at_k([c.metric for c in item.completions]) for item in items]
        with_ci(numbers, f"mean@{options.samples}", item_means)
    # Interval over items, not completions: an item's k completions are not independent.
    if any(FORMAT_REWARD in c.rewards for c in completions):  # benchmarks score no format
        format_per_item = [metrics.mean([c.rewards.get(FORMAT_REWARD) or 0.0 for c in item.completions]) for item in items]
        with_ci(numbers, "format_rate", format_per_item)
    for name in _reward_names(completions):
        per_item = [_mean_reward(item.completions, name) for item in items]
        with_ci(numbers, f"reward/{name}", [value for value in per_item if value is not None])
    notes = Counter(note for c in completions for note in c.note.split("; ") if note)
    numbers |= {f"notes/{note}": count / len(completions) for note, count in sorted(notes.items())}
    numbers |= tool_metrics([c.tool_use() for c in completions])
    numbers["mean_length"] = metrics.mean([c.n_tokens for c in completions])
    numbers["truncation_rate"] = metrics.mean([float(c.truncated) for c in completions])
    return numbers


def _reward_names(completions: Sequence[CompletionRecord]) -> list[str]:
    """Every reward that scored some completion, in first-seen order."""
    return list(dict.fromkeys(name for completion in completions for name in completion.rewards))


def _mean_reward(completions: Sequence[CompletionRecord], name: str) -> float | None:
    """Mean of reward ``name`` over the completions it scored; None when it scored none."""
    values = [c.rewards[name] for c in completions if c.rewards.get(name) is not None]
    return metrics.mean(values) if values else None


def _interval_adder(options: EvalOptions) -> Callable[[dict[str, float], str, list[float]], None]:
    """``add(numbers, name, values)``: store the mean of ``values`` and its interval bounds."""

    def add(numbers: dict[str, float], name: str, values: list[float]) -> None:
        low, high = metrics.confidence_interval(
            values, confidence=options.confidence, resamples=options.bootstrap_resamples, seed=options.seed
        )
        numbers |= {name: metrics.mean(values), f"{name}_ci_low": low, f"{name}_ci_high": high}

    return add


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON data (tuples become lists, unknown objects their ``str``)."""
    return json.loads(json.dumps(value, default=str))


def _digest(pairs: list[tuple[str, Any]]) -> str:
    payload = json.dumps(sorted(pairs, key=lambda pair: pair[0]), default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
