"""The config sections of what a run evaluates, logs, warns about and saves (``eval``, ``log``, ``log.alerts``,
``checkpoint``); :mod:`mmgrpo.config.schema` holds the sections of what it trains and assembles the tree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mmgrpo.config.fields import option


@dataclass
class BenchmarkConfig:
    """One published benchmark read from its files as published (see docs/benchmarks.md)."""

    name: str = option("", "Registered benchmark (eval/benchmarks/), e.g. mathvista_testmini, mmmu_val.")
    path: str = option("", "Its files as downloaded: a parquet/json file or the folder holding them.")
    split: str | None = option(None, "Split to read; None = the benchmark's own (testmini, validation, ...).")
    limit: int | None = option(None, "Evaluate at most this many items (file order); None = all.", ge=1)


@dataclass
class EvalConfig:
    """Held-out evaluation on data.test during and around training, and `mmgrpo eval` on benchmarks."""

    before: bool = option(True, "Evaluate before GRPO (after SFT).")
    after: bool = option(True, "Evaluate after GRPO.")
    every_n_steps: int = option(0, "Also evaluate every N GRPO steps; 0 = never.", ge=0)
    limit: int | None = option(300, "Evaluate on at most this many items of each held-out dataset; None = all.", ge=1)
    samples: int = option(1, "Completions per item; > 1 reports pass@k and mean@k.", ge=1)
    temperature: float = option(0.0, "0 = greedy decoding.", ge=0)
    batch_size: int = option(64, "Prompts per generate call.", ge=1)
    max_new_tokens: int | None = option(
        None, "Most tokens per completion; None = rollout.max_new_tokens on data.test, the benchmark's own limit "
        "on eval.benchmarks.", ge=1,
    )
    benchmarks: list[BenchmarkConfig] = option(
        [], "Benchmarks `mmgrpo eval` runs, e.g. [{name: mmmu_val, path: DIR}]; when set, data.test is evaluated "
        "only if given with --data. In training: evaluated beside data.test (each at most eval.limit items) before "
        "and after GRPO and every eval.every_n_steps, logged as eval/<benchmark>/accuracy.",
    )
    prompt_style: Literal["official", "task"] = option(
        "official", "Benchmark prompts: the benchmark's own, or the trained task's <think>/<answer> format."
    )
    predictions: str | None = option(
        None, "JSON-lines file of saved completions ({id, completion} per line) to score on eval.benchmarks "
        "instead of generating: no model is loaded.",
    )
    predictions_model: str | None = option(
        None, "The model that wrote eval.predictions (folder, Hub id or tiny:<family>, with model.* budgets): its "
        "family and media budget set the convention its answers are read in (RefCOCO boxes); only its config and "
        "processor are read. None = Qwen2.5-VL at the default image budget.",
    )
    judge: str | None = option(
        None, "Name of a task.reward_models entry (kind judge, a text causal LM) that extracts the answers a "
        "benchmark's reference reads with an LLM (MathVista) where its rules cannot; such verdicts are noted "
        "judge-extracted. None = rules only.",
    )


@dataclass
class AlertsConfig:
    """When the trainer warns (and the report shows a banner) that a run is going wrong."""

    kl_max: float = option(1.0, "Mean per-token KL to the reference above this: the policy runs away from it.", gt=0)
    entropy_drop: float = option(
        0.1, "Entropy below this fraction of the first step's: the policy collapses onto few answers.", gt=0, lt=1
    )
    zero_variance_steps: int = option(
        20, "This many steps in a row where every group's rewards were all equal (zero advantages).", ge=1
    )
    truncation_max: float = option(0.5, "More than this fraction of completions hit rollout.max_new_tokens.", gt=0, le=1)


@dataclass
class LogConfig:
    """Run directory, metrics sinks and sampled completions."""

    output_dir: str = option("runs", "Runs are written to <output_dir>/<run_name>/.")
    run_name: str | None = option(None, "Name of the run directory; None = a timestamp.")
    tensorboard: bool = option(True, "Write TensorBoard event files.")
    wandb: bool = option(False, "Log to Weights & Biases (needs the wandb extra).")
    wandb_project: str = option("mmgrpo", "W&B project.")
    log_completions_every: int = option(
        50, "Write sampled completions to completions.jsonl every N steps; 0 = never.", ge=0
    )
    completions_per_log: int = option(8, "Completions written each time.", ge=1)
    progress_bar: bool = option(True, "Show a live progress bar.")
    report_every_n_steps: int = option(
        100, "Rewrite report.html every N GRPO steps while training (and always at the end); 0 = only at the end.",
        ge=0,
    )
    alerts: AlertsConfig = option(AlertsConfig(), "Thresholds of the training-health warnings.")


@dataclass
class CheckpointConfig:
    """Checkpoints under <run dir>/checkpoints/step-N/."""

    every_n_steps: int = option(
        100, "Save every N GRPO steps (and at the end), and every N SFT steps (its end: the finished model); "
        "0 = only at the end.", ge=0
    )
    keep_last: int | None = option(2, "Keep the newest K checkpoints; None = keep all.", ge=1)
    resume: str | None = option(
        None, "Checkpoint folder to resume from, or 'latest' (where the run named by log.run_name stopped); "
        "None = a fresh run, in a folder no run has used."
    )
    allow_config_changes: bool = option(
        False, "On resume, accept changed keys that alter what the run computes (all but log.*, checkpoint.*, "
        "eval.*, data.dir, train.num_threads, task.reward_workers); the resumed run then no longer continues "
        "the saved one exactly."
    )
