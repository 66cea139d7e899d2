"""A benchmark in an evaluation: its items as prompts, its scorer as the runner's item scorer,
saved completions as an engine (``--predictions``), and submission files for hidden answers."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.benchmarks.base import BENCHMARKS, Ask, Benchmark, Item, PromptStyle
from eval.results import (
    CompletionRecord,
    EvalOptions,
    EvalResult,
    ItemRecord,
    json_safe,
)
from eval.resume import Journal, PartJournal
from eval.runner import evaluate_policy
from mmgrpo.config import BenchmarkConfig
from mmgrpo.distributed import Ranks
from mmgrpo.rollout.base import EncodesNothing, RolloutEngine, SamplingParams
from mmgrpo.rollout.tool_metrics import ToolUse
from mmgrpo.skipped_rows import SkippedRow
from mmgrpo.types import Completion, Sample
from tasks.base import ModelInfo

logger = logging.getLogger(__name__)

PREDICTION_ID_KEYS = ("id", "prompt_id", "pid", "question_id")  # ours, samples.jsonl's, MathVista's, lmms-eval's
PREDICTION_TEXT_KEYS = ("completion", "response", "prediction")
NO_PREDICTION = "no prediction"


@dataclass
class BenchmarkSet:
    """One benchmark's items as prompts in one prompt style, and the rows it could not read."""

    benchmark: Benchmark
    style: PromptStyle
    items: dict[str, Item]
    samples: list[Sample]
    skipped: list[SkippedRow] = field(default_factory=list)
    ask: Ask | None = None
    """The judge model that extracts answers the benchmark's rules cannot read (``eval.judge``), if any."""
    think: bool = True
    """Whether the ``task`` style asks for ``<think>`` first (how the prompts were built)."""

    @property
    def name(self) -> str:
        return self.benchmark.name

    def evaluate(
        self, engine: RolloutEngine, options: EvalOptions, *, ranks: Ranks = Ranks(), journal: PartJournal | None = None
    ) -> EvalResult:
        """Every item answered by ``engine`` and scored by the benchmark's rules, with what it reports of its own
        (:meth:`~eval.benchmarks.base.Benchmark.aggregate` over first completions); items split over ``ranks``
        and resumed from ``journal`` as :func:`~eval.runner.evaluate_policy` does."""
        result = evaluate_policy(engine, self.samples, {self.name: self.score}, options, skipped=self.skipped,
                                 ranks=ranks, journal=journal, label=self.name)
        scored = [(self.items[record.sample_id], record.completions[0].parsed_answer, record.completions[0].metric)
                  for record in result.items]
        numbers = self.benchmark.aggregate(scored)
        if numbers:
            result.reported[self.name] = numbers
        return result

    def for_model(self, model: ModelInfo) -> BenchmarkSet:
        """This set as it asks and scores ``model`` (see :meth:`~eval.benchmarks.base.Benchmark.for_model`):
        the prompts are built again when the benchmark's view of the model differs."""
        benchmark = self.benchmark.for_model(model)
        if benchmark is self.benchmark:
            return self
        samples = [prompt_sample(benchmark, self.items[sample.id], self.style, think=self.think)
                   for sample in self.samples]
        return dataclasses.replace(self, benchmark=benchmark, samples=samples)

    def score(self, sample: Sample, completions: Sequence[Completion]) -> ItemRecord:
        """The runner's item scorer: every completion judged by the benchmark's own rules."""
        item = self.items[sample.id]
        records = []
        for completion in completions:
            verdict = self.benchmark.judge(completion.text, item, self.style, self.ask)
            records.append(CompletionRecord(
                text=completion.text, n_tokens=len(completion.token_ids), truncated=completion.truncated,
                metric=verdict.metric,
                parsed_answer=json_safe(verdict.prediction), rewards={}, reward=0.0,
                extracted=json_safe(verdict.extracted), note=verdict.note,
                **CompletionRecord.tool_fields(ToolUse.of(completion)),
            ))
        return ItemRecord(
            sample_id=item.id, task=self.name, answer=json_safe(item.answer), media=list(item.media_refs),
            completions=records, prompt=sample.user_text(), categories=json_safe(dict(item.categories)),
        )


def evaluate_benchmarks(
    benches: Sequence[BenchmarkSet], engine: RolloutEngine, options: EvalOptions, *, max_new_tokens: int | None = None,
    ranks: Ranks = Ranks(), journal: Journal | None = None,
) -> list[EvalResult]:
    """Each benchmark evaluated under its own token limit (``max_new_tokens`` when given), the limit recorded."""
    parts = []
    for bench in benches:
        limit = generation_limit(bench, max_new_tokens)
        logger.info("%s: generating at most %d new tokens per completion", bench.name, limit)
        part = bench.evaluate(engine, dataclasses.replace(options, max_new_tokens=limit), ranks=ranks,
                              journal=journal.part(f"benchmark:{bench.name}") if journal is not None else None)
        part.limits[bench.name] = limit
        parts.append(part)
    return parts


def generation_limit(bench: BenchmarkSet, max_new_tokens: int | None) -> int:
    """The token limit ``bench`` is generated under: ``max_new_tokens``, else its own for its prompt style."""
    return max_new_tokens or bench.benchmark.generation_limit(bench.style)


def load_benchmark(
    spec: BenchmarkConfig, style: PromptStyle, *, think: bool = True, ask: Ask | None = None
) -> BenchmarkSet:
    """The items of ``spec`` (at most ``spec.limit``) as prompts (:func:`prompt_sample`)."""
    benchmark = BENCHMARKS.get(spec.name)
    items, skipped = benchmark.read(spec.path, spec.split or benchmark.split)
    items = items[: spec.limit] if spec.limit is not None else items
    if not items:
        raise ValueError(f"benchmark {spec.name}: no usable items in {spec.path} (expected: {benchmark.layout})")
    samples = [prompt_sample(benchmark, item, style, think=think) for item in items]
    if skipped:
        logger.warning("%s: skipped %d of %d rows (first: %s %s)", spec.name, len(skipped), len(skipped) + len(items),
                       skipped[0].reason, skipped[0].detail)
    return BenchmarkSet(benchmark, style, {item.id: item for item in items}, samples, skipped, ask, think)


def prompt_sample(benchmark: Benchmark, item: Item, style: PromptStyle, *, think: bool = True) -> Sample:
    """One item as a prompt: the benchmark's system message (official style, where it has one), then a user
    turn with the images, the videos (as video tasks pass them) and the prompt text (under the ``task`` style
    with the think or the answer-only instruction)."""
    content = [*({"type": "image", "image": image} for image in item.images),
               *({"type": "video", "video": video} for video in item.videos),
               {"type": "text", "text": benchmark.prompt(item, style, think=think)}]
    system = [{"role": "system", "content": benchmark.system}] if style == "official" and benchmark.system else []
    return Sample(id=item.id, task=benchmark.name, answer=item.answer,
                  messages=[*system, {"role": "user", "content": content}])


class SavedCompletions(EncodesNothing):
    """A rollout engine that answers each prompt with a completion saved earlier (by any system)."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = texts

    def generate(self, samples: Sequence[Sample], params: SamplingParams, group_sizes: Any = None) -> list[list[Completion]]:
        return [[Completion(self.texts[sample.id], token_ids=[])] for sample in samples]

    def before_update(self) -> None:
        """Never trained."""

    def update_weights(self, model_or_state_dict: Any) -> None:
        raise NotImplementedError("saved completions have no weights")


def read_predictions(path: str | Path) -> dict[str, str]:
    """Item id -> completion, from JSON lines naming the id (``id``/``prompt_id``/``pid``/``question_id``) and
    the text (``completion``/``response``/``prediction``); a line naming neither is an error with its number."""
    texts: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        item_id = next((row[key] for key in PREDICTION_ID_KEYS if row.get(key) is not None), None)
        text = next((row[key] for key in PREDICTION_TEXT_KEYS if row.get(key) is not None), None)
        if item_id is None or text is None:
            raise ValueError(f"{path}:{number}: needs an id ({'/'.join(PREDICTION_ID_KEYS)}) and a completion "
                             f"({'/'.join(PREDICTION_TEXT_KEYS)}); found keys {sorted(row)}")
        texts.setdefault(str(item_id), str(text))  # several samples per item: the first one counts
    return texts


def with_predictions(bench: BenchmarkSet, texts: Mapping[str, str], source: str) -> BenchmarkSet:
    """``bench`` restricted to the items ``texts`` answers; every other item is skipped as ``no prediction``."""
    kept = [sample for sample in bench.samples if sample.id in texts]
    missing = [SkippedRow(sample.id, source, NO_PREDICTION, "") for sample in bench.samples if sample.id not in texts]
    return dataclasses.replace(bench, samples=kept, skipped=[*bench.skipped, *missing])


def write_submissions(out_dir: str | Path, result: EvalResult, benches: Sequence[BenchmarkSet]) -> list[Path]:
    """For each benchmark whose answers are hidden: ``submission-<name>.json`` in the form its leaderboard takes."""
    written = []
    for bench in benches:
        records = [item for item in result.items if item.task == bench.name and item.answer is None]
        if not records:
            continue
        entries = {}
        for record in records:
            completion = record.completions[0]
            item = bench.items[record.sample_id]
            verdict = bench.benchmark.judge(completion.text, item, bench.style, bench.ask)
            key, value = bench.benchmark.submission(item, completion.text, verdict)
            entries[key] = value
        path = Path(out_dir) / f"submission-{bench.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entries, indent=1, default=str))
        written.append(path)
    return written
