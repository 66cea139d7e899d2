"""``mmgrpo train``: the whole DeepSeek-R1-style job for one config.

Model -> data -> cold-start SFT -> eval (before) -> GRPO -> eval (after) -> report.
Outputs go to ``<log.output_dir>/<log.run_name>/``: ``config.yaml``, ``metrics.jsonl``,
``completions.jsonl``, ``checkpoints/``, ``eval/``, ``report.md``, ``summary.json``.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eval import EvalOptions, EvalResult, comparison_table, evaluate_policy
from mmgrpo.config import Config
from mmgrpo.trainer.checkpoint import latest_checkpoint
from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.trainer.metrics import MetricsLogger, read_metrics
from mmgrpo.trainer.report import write_report
from mmgrpo.trainer.setup import (
    SampleSet, build_engine, load_policy, load_samples, media_budgets, pick_device, resolve_model_path,
)
from mmgrpo.trainer.sft import run_sft, sft_examples

logger = logging.getLogger(__name__)


@dataclass
class RunPaths:
    """Where a run writes."""

    root: Path  # <output_dir>/<run_name>
    shared: Path  # <output_dir>/_cache: generated data and tiny models, reused across runs

    data: Path  # where generated datasets go

    @classmethod
    def for_config(cls, config: Config) -> RunPaths:
        output = Path(config.log.output_dir)
        name = config.log.run_name or time.strftime("run-%Y%m%d-%H%M%S")
        shared = output / "_cache"
        data = Path(config.data.dir) if config.data.dir else shared / "data"
        return cls(root=output / name, shared=shared, data=data)


def prepare_process(config: Config) -> None:
    """Seed every generator and set torch's CPU threads, as every command does first."""
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    if config.train.num_threads:
        torch.set_num_threads(config.train.num_threads)


def load_run_policy(config: Config, *, checkpoint: Path | None = None) -> tuple[torch.nn.Module, Any, RunPaths]:
    """Prepare the process, then load the policy of ``config.model`` (tiny models built once under the cache)."""
    prepare_process(config)
    paths = RunPaths.for_config(config)
    base_path = resolve_model_path(config.model, paths.shared / "models", config.seed)
    model, processor = load_policy(config, base_path, pick_device(config.train.device), checkpoint=checkpoint)
    return model, processor, paths


def run_training(config: Config) -> dict[str, Any]:
    """Run the job ``config`` describes; returns the run summary (also in ``summary.json``)."""
    started = time.perf_counter()
    paths = RunPaths.for_config(config)
    paths.root.mkdir(parents=True, exist_ok=True)
    config.save_yaml(paths.root / "config.yaml")
    _log_to_file(paths.root / "train.log")
    train_set = load_samples(config.data.train, config.task, paths.data, seed=config.data.seed)
    test_set = load_samples(config.data.test, config.task, paths.data, seed=config.data.seed)
    test_set.samples = test_set.samples[: config.eval.limit]
    resume_from = _resume_checkpoint(config, paths.root)
    model, processor, _ = load_run_policy(config, checkpoint=resume_from)

    evaluations = _load_evaluations(paths.root) if resume_from else {}
    if resume_from is None:
        if config.sft.enabled and config.sft.steps > 0:
            _cold_start(config, model, processor, train_set, paths.root)
        if config.eval.before:
            evaluations["before GRPO"] = _evaluate(config, model, processor, test_set, paths.root / "eval" / "before")
            _save_evaluations(paths.root, evaluations)

    trainer = GRPOTrainer(
        config, paths.root, model, processor, train_set,
        evaluate=lambda tag: _evaluate(config, model, processor, test_set, paths.root / "eval" / tag).summary(),
        resume_from=resume_from,
    )
    grpo_started = time.perf_counter()
    trainer.train()
    grpo_seconds = time.perf_counter() - grpo_started
    if config.eval.after and not trainer.interrupted:
        evaluations["after GRPO"] = _evaluate(config, model, processor, test_set, paths.root / "eval" / "after")
        _save_evaluations(paths.root, evaluations)

    summary = _summary(evaluations, trainer, train_set, test_set, grpo_seconds, time.perf_counter() - started)
    (paths.root / "summary.json").write_text(json.dumps(summary, indent=2))
    tables = {"Held-out evaluation": comparison_table(evaluations)} if evaluations else {}
    write_report(paths.root, read_metrics(paths.root / "metrics.jsonl"), summary, tables)
    return summary


def _cold_start(config: Config, model, processor, train_set: SampleSet, run_dir: Path) -> None:  # noqa: ANN001
    """Supervised warm-up on SFT files, or on the task's reference completions of the training prompts."""
    examples = sft_examples([spec.path for spec in config.sft.data], train_set)
    (run_dir / "sft").mkdir(parents=True, exist_ok=True)
    sft_log = MetricsLogger(run_dir / "sft", tensorboard=config.log.tensorboard)
    try:
        run_sft(
            model, processor, examples, config.sft, budgets=media_budgets(config.model, processor), seed=config.seed,
            metrics=sft_log, progress_bar=config.log.progress_bar,
        )
    finally:
        sft_log.close()


def _evaluate(config: Config, model, processor, test_set: SampleSet, out_dir: Path) -> EvalResult:  # noqa: ANN001
    engine = build_engine(config, model, processor)
    options = EvalOptions(
        samples=config.eval.samples, temperature=config.eval.temperature, batch_size=config.eval.batch_size,
        max_new_tokens=config.eval.max_new_tokens or config.rollout.max_new_tokens, seed=config.seed,
    )
    result = evaluate_policy(engine, test_set.samples, test_set.tasks, options, skipped=test_set.skipped)
    result.write(out_dir, model_name=out_dir.name)
    return result


def _summary(
    evaluations: dict[str, EvalResult], trainer: GRPOTrainer, train_set: SampleSet, test_set: SampleSet,
    grpo_seconds: float, wall_seconds: float,
) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key, tag in (("accuracy_before_grpo", "before GRPO"), ("accuracy_after_grpo", "after GRPO")):
        if tag in evaluations:
            summary[key] = evaluations[tag].summary()["accuracy"]
    if len(summary) == 2:
        summary["accuracy_gain"] = summary["accuracy_after_grpo"] - summary["accuracy_before_grpo"]
    summary |= {
        "n_eval": len(test_set.samples),
        "n_train": len(train_set.samples),
        "skipped_rows": len(train_set.skipped) + len(test_set.skipped),
        "grpo_steps": trainer.step_index,
        "interrupted": trainer.interrupted,
        "grpo_seconds": round(grpo_seconds, 1),
        "wall_seconds": round(wall_seconds, 1),
    }
    return summary


def _resume_checkpoint(config: Config, run_dir: Path) -> Path | None:
    resume = config.checkpoint.resume
    if resume is None:
        return None
    checkpoint = latest_checkpoint(run_dir / "checkpoints") if resume == "latest" else Path(resume)
    if checkpoint is None or not checkpoint.is_dir():
        raise FileNotFoundError(f"checkpoint.resume={resume!r}: no checkpoint found (looked in {run_dir / 'checkpoints'})")
    return checkpoint


def _save_evaluations(run_dir: Path, evaluations: dict[str, EvalResult]) -> None:
    (run_dir / "evaluations.json").write_text(
        json.dumps({tag: result.to_dict() for tag, result in evaluations.items()}, indent=2, default=str)
    )


def _load_evaluations(run_dir: Path) -> dict[str, EvalResult]:
    path = run_dir / "evaluations.json"
    if not path.is_file():
        return {}
    return {tag: EvalResult.from_dict(data) for tag, data in json.loads(path.read_text()).items()}


def _log_to_file(path: Path) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)

