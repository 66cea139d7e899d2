"""``run``: benchmark one or more models (or checkpoints) on task/dataset pairs and published
benchmarks, write the reports; ``score_predictions``: score saved completions without a model.

Each model is loaded the way the trainer loads its policy, wrapped in a rollout engine
and evaluated on the same samples; per-model outputs go to ``OUT/models/<i>-<name>/``,
the side-by-side comparison to ``OUT/`` (see :mod:`eval.report`), every item left out (at
load or by the batch builder) to ``OUT/skipped_rows.jsonl``. Each benchmark is generated under
its own token limit (unless one is given) and scored by its own rules (:mod:`eval.benchmarks`).
``run_config`` does the same from an mmgrpo :class:`~mmgrpo.config.Config` (what ``mmgrpo eval`` builds).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from eval.benchmarks.base import Ask, PromptStyle
from eval.benchmarks.runs import (
    BenchmarkSet, SavedCompletions, evaluate_benchmarks, generation_limit, load_benchmark, read_predictions,
    with_predictions, write_submissions,
)
from eval.report import write_outputs
from eval.results import EvalOptions, EvalResult
from eval.resume import AlreadyScored, Journal, claim, finish
from eval.runner import evaluate_policy
from mmgrpo.config import BenchmarkConfig, Config, DataConfig, DatasetConfig, ModelConfig, RolloutConfig, TaskConfig
from mmgrpo.distributed import Ranks
from mmgrpo.models.budget_limits import require_budgets_fit
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.rollout.base import ENGINES, RolloutEngine
from mmgrpo.rollout.tool_turns import ToolTurns
from mmgrpo.models.prompt_cache import PromptCache, open_prompt_cache
from mmgrpo.skipped_rows import LEDGER_FILE, SkipLedger
from mmgrpo.inputs import (
    SampleSet, load_samples, media_budgets, pick_device, resolve_model_path, reward_policy, task_model_info,
)
from tasks.base import ModelInfo
from tasks.reward_calls import RewardPolicy
from mmgrpo.reward_models import RewardModel

logger = logging.getLogger(__name__)

CACHE_DIR_NAME = "_cache"  # under the output folder: generated datasets and tiny models
IN_PROCESS_ENGINE = "hf"  # takes the evaluation's own options; other engines are built from their config


def run(
    models: Sequence[str],
    datasets: Sequence[DatasetConfig],
    out_dir: str | Path,
    *,
    options: EvalOptions | None = None,
    model: ModelConfig | None = None,
    task: TaskConfig | None = None,
    max_prompt_tokens: int = 1024,
    device: str = "auto",
    engine: str = "hf",
    rollout: RolloutConfig | None = None,
    group_shared: bool = True,
    cache_dir: str | Path | None = None,
    data_seed: int = 0,
    prompt_cache: PromptCache | None = None,
    benchmarks: Sequence[BenchmarkConfig] = (),
    prompt_style: PromptStyle = "official",
    benchmark_max_new_tokens: int | None = None,
    judge: Ask | None = None,
    ranks: Ranks = Ranks(),
) -> dict[str, EvalResult]:
    """Evaluate every model in ``models`` on ``datasets`` and ``benchmarks``; returns model -> result.

    ``models``: local folders, Hub ids or ``tiny:<family>``. ``datasets``: each a path (or
    a generator recipe) with its split, task, adapter and row limit. ``model`` gives the
    dtype, media budgets and tiny-model options shared by all models; ``task`` the
    default task and prompt style. Datasets generated from a recipe (and tiny models) are
    cached under ``cache_dir`` (default ``out_dir/_cache``); encoded prompts in ``prompt_cache``
    (the preprocessing cache) when the engine decodes from encoded tensors. ``engine`` names the
    rollout engine; one other than ``hf`` is built from ``rollout`` (e.g. ``rollout.vllm``). Benchmarks
    are asked in ``prompt_style`` and generated under ``benchmark_max_new_tokens`` (None: each its own
    limit); ``judge`` extracts the answers a benchmark's rules cannot read where its reference uses an LLM.

    On several ``ranks`` each scores its block of every dataset and benchmark and the main process alone
    writes (:mod:`eval.shards`). A run killed midway resumes, into the same ``out_dir`` with the same
    settings, from the items it had scored (:mod:`eval.resume`).
    """
    if not models:
        raise ValueError("run needs at least one model")
    if not datasets and not benchmarks:
        raise ValueError("run needs a dataset or a benchmark")
    out = Path(out_dir)
    cache = Path(cache_dir) if cache_dir is not None else out / CACHE_DIR_NAME
    options = options or EvalOptions()
    model_config, task_config, rollout_config = model or ModelConfig(), task or TaskConfig(), rollout or RolloutConfig()
    main = ranks.is_main_process
    ledger = SkipLedger(out / LEDGER_FILE if main else None)
    engine_options = {"group_shared": group_shared, "max_prompt_len": max_prompt_tokens}
    if prompt_cache is not None and not ENGINES.get(engine).needs_loaded_media:
        engine_options["cache"] = prompt_cache
    settings = {
        "models": list(models),
        "datasets": [dataclasses.asdict(spec) for spec in datasets],
        "options": dataclasses.asdict(options),
        "model": dataclasses.asdict(model_config),
        "task": dataclasses.asdict(task_config),
        "engine": engine,
        "rollout": None if engine == IN_PROCESS_ENGINE else dataclasses.asdict(rollout_config),
        "max_prompt_tokens": max_prompt_tokens,
        "data_seed": data_seed,
        "benchmarks": [dataclasses.asdict(spec) for spec in benchmarks],
        "prompt_style": prompt_style,
        "benchmark_max_new_tokens": benchmark_max_new_tokens,
        "judge": judge is not None,
    }
    partial = claim(out, {**settings, "options": dataclasses.asdict(dataclasses.replace(options, progress=True))}, ranks)
    results: dict[str, EvalResult] = {}
    model_paths: dict[str, str] = {}
    benches = [load_benchmark(spec, prompt_style, think=task_config.think, ask=judge) for spec in benchmarks]
    for index, name in enumerate(_unique_names(models)):
        config = dataclasses.replace(model_config, name_or_path=models[index])
        with ranks.main_process_first():  # tiny models and generated datasets are built once, in the cache
            model_paths[name] = resolve_model_path(config, cache / "models", options.seed)
            # Built per model: a task sees images at the size this model sees them, in its coordinate system.
            info = task_model_info(config, model_paths[name])
            eval_sets = {label: load_samples([spec], task_config, cache / "data", seed=data_seed, model=info,
                                             tools=rollout_config.prompt_tools)
                         for label, spec in zip(_unique_names([_dataset_label(spec) for spec in datasets]), datasets)}
        if index == 0:
            ledger.add([row for eval_set in eval_sets.values() for row in eval_set.skipped], split="test", stage="load")
        logger.info("evaluating %s on %d dataset(s) and %d benchmark(s)", name, len(eval_sets), len(benches))
        folder = f"{index + 1}-{_slug(name)}"
        journal = Journal(partial / folder, ranks)
        try:
            results[name] = _evaluate_model(
                model_paths[name], config, eval_sets, [bench.for_model(info) for bench in benches], options,
                device=pick_device(device), engine=engine,
                rollout=rollout_config, rewards=reward_policy(task_config),
                benchmark_max_new_tokens=benchmark_max_new_tokens, ranks=ranks, journal=journal, **engine_options,
            )
        finally:
            journal.close()
        if main:
            model_out = out / "models" / folder
            results[name].write(model_out, model_name=name)
            write_submissions(model_out, results[name], benches)
        ledger.add(results[name].skipped, split="test", stage="eval")
    if main:
        write_outputs(out, results, config=settings | {"models": model_paths})
    finish(partial, ranks)
    return results


def score_predictions(
    predictions: str | Path, benchmarks: Sequence[BenchmarkConfig], out_dir: str | Path, *,
    options: EvalOptions | None = None, prompt_style: PromptStyle = "official", think: bool = True,
    judge: Ask | None = None, model: ModelInfo | None = None,
) -> dict[str, EvalResult]:
    """Score saved completions (JSON lines: item id + completion, from any system) on ``benchmarks``
    with the same scorer a model run uses; no model is loaded. ``model``: the model that wrote them, for
    the benchmarks that read answers in its conventions (RefCOCO); None: each benchmark's default. Items
    without a prediction are skipped as ``no prediction``. Returns {predictions file name: result}."""
    if not benchmarks:
        raise ValueError("scoring predictions needs at least one benchmark (eval.benchmarks / --benchmark)")
    texts = read_predictions(predictions)
    options = options or EvalOptions()
    engine = SavedCompletions(texts)
    loaded = [load_benchmark(spec, prompt_style, think=think, ask=judge) for spec in benchmarks]
    benches = [with_predictions(bench if model is None else bench.for_model(model), texts, str(predictions))
               for bench in loaded]
    parts = [bench.evaluate(engine, options) for bench in benches]
    name = Path(predictions).name
    results = {name: EvalResult.merged(parts)}
    write_outputs(out_dir, results, config={"predictions": str(predictions), "prompt_style": prompt_style,
                                            "benchmarks": [dataclasses.asdict(spec) for spec in benchmarks],
                                            "judge": judge is not None,
                                            "predictions_model": None if model is None else dataclasses.asdict(model)})
    write_submissions(out_dir, results[name], benches)
    return results


def _evaluate_model(
    path: str, config: ModelConfig, eval_sets: Mapping[str, SampleSet], benches: Sequence[BenchmarkSet],
    options: EvalOptions, *, device: torch.device, engine: str, rollout: RolloutConfig, rewards: RewardPolicy,
    benchmark_max_new_tokens: int | None, ranks: Ranks, journal: Journal, **engine_options: Any,
) -> EvalResult:
    """Load one model, evaluate it on each dataset's task samples (labelled with their dataset when there
    are several, for per-dataset results) then each benchmark (under its own token limit), and free it
    again before the next one loads. A model whose every item ``journal`` holds is not loaded at all."""
    scoring = {"rewards": rewards, "benchmark_max_new_tokens": benchmark_max_new_tokens, "ranks": ranks,
               "journal": journal}
    if journal.holds_all({f"data:{label}": eval_set.samples for label, eval_set in eval_sets.items()}
                         | {f"benchmark:{bench.name}": bench.samples for bench in benches}):
        logger.info("%s: every item was scored before the run stopped; the model is not loaded", path)
        return _evaluate_sets(AlreadyScored(), eval_sets, benches, options, **scoring)
    started = time.perf_counter()
    policy, processor = load_model_and_processor(
        path, dtype=config.dtype, attn_implementation=config.attn_implementation,
        trust_remote_code=config.trust_remote_code, device=device,
    )
    load_seconds = time.perf_counter() - started
    require_budgets_fit(config, policy, processor)
    longest = max([options.max_new_tokens, *(generation_limit(bench, benchmark_max_new_tokens) for bench in benches)])
    sampler = _engine(engine, policy, processor, config, rollout, max_new_tokens=longest, seed=options.seed,
                      **engine_options)
    result = _evaluate_sets(sampler, eval_sets, benches, options, **scoring)
    result.timings["load_seconds"] = load_seconds
    del policy, processor, sampler
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def _evaluate_sets(
    sampler: RolloutEngine, eval_sets: Mapping[str, SampleSet], benches: Sequence[BenchmarkSet], options: EvalOptions,
    *, rewards: RewardPolicy, benchmark_max_new_tokens: int | None, ranks: Ranks, journal: Journal,
) -> EvalResult:
    """Every dataset's and benchmark's items answered by ``sampler`` and scored, in one result."""
    parts = []
    for label, eval_set in eval_sets.items():
        part = evaluate_policy(
            sampler, eval_set.samples, eval_set.tasks, options, skipped=eval_set.skipped, reward_policy=rewards,
            ranks=ranks, journal=journal.part(f"data:{label}"), label=label,
        )
        if len(eval_sets) > 1:
            for item in part.items:
                item.categories["dataset"] = label
        parts.append(part)
    parts += evaluate_benchmarks(benches, sampler, options, max_new_tokens=benchmark_max_new_tokens, ranks=ranks,
                                 journal=journal)
    return EvalResult.merged(parts)


def _engine(
    name: str, policy: torch.nn.Module, processor: Any, config: ModelConfig, rollout: RolloutConfig, *,
    max_new_tokens: int, seed: int, **engine_options: Any,
) -> RolloutEngine:
    """The rollout engine ``name`` around ``policy``: the in-process one with the evaluation's own options, any
    other as its config section describes it (``rollout.vllm``), sized for the longest completion asked; taking
    tool turns when ``rollout.tools`` names any."""
    budgets = media_budgets(config, processor)
    if name == IN_PROCESS_ENGINE:
        engine = ENGINES.get(name)(policy, processor, budgets=budgets, **engine_options)
    else:
        view = Config(
            seed=seed, model=config, rollout=dataclasses.replace(rollout, engine=name, max_new_tokens=max_new_tokens),
            data=dataclasses.replace(DataConfig(), max_prompt_tokens=engine_options["max_prompt_len"]),
        )
        engine = ENGINES.get(name).from_config(view, policy, processor, budgets)
    return ToolTurns.from_config(engine, rollout, policy, processor, budgets) if rollout.tools else engine


def run_config(
    config: Config, out_dir: str | Path, models: Sequence[str] | None = None, *, explicit_data: bool = False
) -> dict[str, EvalResult]:
    """:func:`run` with everything taken from ``config``: ``eval.benchmarks``, and ``data.test`` as the
    datasets (each capped at ``eval.limit`` rows; with benchmarks only when ``explicit_data``),
    ``eval.*`` the options, ``models`` default to ``model.name_or_path``. With ``eval.predictions``
    the saved completions are scored on the benchmarks instead (:func:`score_predictions`)."""
    if config.eval.predictions:
        return score_predictions(config.eval.predictions, config.eval.benchmarks, out_dir,
                                 options=eval_options(config), prompt_style=config.eval.prompt_style,
                                 think=config.task.think, judge=answer_judge(config),
                                 model=predictions_model_info(config, out_dir))
    return run(
        list(models or [config.model.name_or_path]),
        [] if config.eval.benchmarks and not explicit_data else held_out_datasets(config),
        out_dir,
        options=eval_options(config),
        model=config.model,
        task=config.task,
        max_prompt_tokens=config.data.max_prompt_tokens,
        device=config.train.device,
        engine=config.rollout.engine,
        rollout=config.rollout,
        group_shared=config.train.group_shared_encoding,
        cache_dir=config.data.dir,
        data_seed=config.data.seed,
        prompt_cache=open_prompt_cache(config),
        benchmarks=config.eval.benchmarks,
        prompt_style=config.eval.prompt_style,
        benchmark_max_new_tokens=config.eval.max_new_tokens,
        judge=answer_judge(config),
        ranks=Ranks.join(config.train.collective_timeout_s),
    )


def answer_judge(config: Config) -> Ask | None:
    """The ``task.reward_models`` entry ``eval.judge`` names, as a question -> reply function; None when unset."""
    if config.eval.judge is None:
        return None
    entries = {entry.name: entry for entry in config.task.reward_models}
    if config.eval.judge not in entries:
        raise ValueError(f"eval.judge {config.eval.judge!r} names no task.reward_models entry; entries: {sorted(entries)}")
    return RewardModel(entries[config.eval.judge]).ask


def predictions_model_info(config: Config, out_dir: str | Path) -> ModelInfo | None:
    """What ``eval.predictions_model`` is, read as a model run reads its model (config and processor, no
    weights; a ``tiny:<family>`` built in the cache like a run's); None when it is not set."""
    if not config.eval.predictions_model:
        return None
    model = dataclasses.replace(config.model, name_or_path=config.eval.predictions_model)
    cache = Path(config.data.dir) if config.data.dir else Path(out_dir) / CACHE_DIR_NAME
    return task_model_info(model, resolve_model_path(model, cache / "models", config.seed))


def eval_options(config: Config) -> EvalOptions:
    """The evaluation options ``config.eval`` (and the rollout's token budget) describe."""
    return EvalOptions(
        samples=config.eval.samples,
        temperature=config.eval.temperature,
        batch_size=config.eval.batch_size,
        max_new_tokens=config.eval.max_new_tokens or config.rollout.max_new_tokens,
        seed=config.seed,
        progress=config.log.progress_bar,
    )


def held_out_datasets(config: Config) -> list[DatasetConfig]:
    """``data.test``, each dataset capped at ``eval.limit`` rows: a mixture's every task is evaluated."""
    return [dataclasses.replace(spec, limit=_smaller(spec.limit, config.eval.limit)) for spec in config.data.test]


def held_out_benchmarks(config: Config) -> list[BenchmarkSet]:
    """``eval.benchmarks`` as training evaluates them (before and after GRPO, every ``eval.every_n_steps``):
    each capped at ``eval.limit`` items (and its own ``limit``), asked in ``eval.prompt_style``."""
    judge = answer_judge(config)
    return [
        load_benchmark(dataclasses.replace(spec, limit=_smaller(spec.limit, config.eval.limit)), config.eval.prompt_style,
                       think=config.task.think, ask=judge)
        for spec in config.eval.benchmarks
    ]


def _dataset_label(spec: DatasetConfig) -> str:
    """How a dataset is named in per-dataset results: its path, or its generator recipe."""
    return spec.path or f"recipe {spec.recipe}"


def _unique_names(names: Sequence[str]) -> list[str]:
    """The names (models, datasets), a repeated one suffixed ``#2``, ``#3``... so each gets its own column."""
    unique = []
    for index, name in enumerate(names):
        earlier = list(names[:index]).count(name)
        unique.append(name if earlier == 0 else f"{name}#{earlier + 1}")
    return unique


def _slug(name: str) -> str:
    """A folder-safe version of a model name (path separators and odd characters become ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


def _smaller(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional limits (None = unlimited)."""
    return b if a is None else a if b is None else min(a, b)
