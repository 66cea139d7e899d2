"""``mmgrpo train``: the whole DeepSeek-R1-style job for one config.

Model -> data -> cold-start SFT -> eval (before) -> GRPO -> eval (after) -> report. Each eval covers
``data.test`` and ``eval.benchmarks`` (each at most ``eval.limit`` items), also every ``eval.every_n_steps``.
Outputs go to ``<log.output_dir>/<log.run_name>/``: ``config.yaml``, ``metrics.jsonl``,
``completions.jsonl``, ``checkpoints/``, ``eval/``, ``report.md``, ``summary.json``,
``skipped_rows.jsonl`` (every row of either split left out, by whom and why),
``reward_errors.jsonl`` (every completion a reward failed to score, and why).

Launched on several ranks (``torchrun``, ``accelerate launch``, ``mmgrpo train --nproc``)
every rank runs this same job with a distributed ``train.backend``: the main process
builds shared caches first and alone writes the outputs; SFT and evaluations run on every
rank (replicated, so that ZeRO-3 and FSDP2 forward passes, which need every rank, work).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import shutil
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from eval import EvalResult, comparison_table, evaluate_policy
from eval.benchmark import eval_options, held_out_benchmarks, held_out_datasets
from eval.benchmarks.runs import BenchmarkSet, evaluate_benchmarks
from eval.held_out import benchmarks_tag, held_out_numbers
from mmgrpo.config import Config
from mmgrpo.distributed import Ranks
from mmgrpo.failures import FAILURE_FILE, RunFailure
from mmgrpo.models.dummy_media import install_dummy_media_pass
from mmgrpo.models.prompt_cache import open_prompt_cache
from mmgrpo.reports.html import refresh_report
from mmgrpo.rollout.vllm import close_shared_engines
from mmgrpo.skipped_rows import LEDGER_FILE, SkipLedger
from mmgrpo.trainer.checkpoint import checkpoint_step, save_model
from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.trainer.backends import TrainingBackend, build_backend
from mmgrpo.trainer.metrics import MetricsLogger, SilentMetricsLogger
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.report import write_report
from mmgrpo.trainer.reward_errors import reward_error_summary
from mmgrpo.trainer.resume import SFT_CHECKPOINTS, SFT_MODEL, ResumePoint, plan_resume
from mmgrpo.inputs import (
    SampleSet, load_samples, media_budgets, pick_device, resolve_model_path, reward_policy, task_model_info,
)
from mmgrpo.trainer.setup import build_engine, demonstrator, load_policy, loading_device
from mmgrpo.trainer.sft import SFTCheckpoints, run_sft, sft_examples, sft_optimizer_spec
from processors import MODALITIES

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
    _show_library_progress_bars(config.log.progress_bar)


def _show_library_progress_bars(show: bool) -> None:
    """transformers' and datasets' own bars (loading and writing weights, generating splits) follow log.progress_bar."""
    import datasets
    import transformers

    if show:
        transformers.utils.logging.enable_progress_bar()
        datasets.enable_progress_bars()
    else:
        transformers.utils.logging.disable_progress_bar()
        datasets.disable_progress_bars()


def load_run_policy(config: Config, *, checkpoint: Path | None = None) -> tuple[torch.nn.Module, Any, RunPaths]:
    """Prepare the process, then load the policy of ``config.model`` (tiny models built once under the cache)."""
    prepare_process(config)
    paths = RunPaths.for_config(config)
    model, processor = load_policy(
        config, base_model_path(config, paths), loading_device(config, pick_device(config.train.device)),
        checkpoint=checkpoint,
    )
    return model, processor, paths


def base_model_path(config: Config, paths: RunPaths) -> str:
    """Where ``config.model`` loads from (a tiny model is built under the cache the first time)."""
    return resolve_model_path(config.model, paths.shared / "models", config.seed)


def run_training(
    config: Config, *, on_eval: Callable[[int, dict[str, float]], None] | None = None
) -> dict[str, Any]:
    """Run the job ``config`` describes; returns the run summary (also in ``summary.json``).

    ``on_eval(step, numbers)`` sees each held-out evaluation during GRPO (``eval.every_n_steps``);
    an exception it raises stops the run as any error in a step does (a sweep prunes trials so)."""
    started = time.perf_counter()
    ranks = Ranks.join(config.train.collective_timeout_s)
    main = ranks.is_main_process
    paths = RunPaths.for_config(config)
    resume = plan_resume(config, paths.root)  # a used folder or a changed config is refused before any work
    ranks.barrier()  # every rank has read the folder before the main process writes into it
    config.log.run_name = paths.root.name  # recorded, so that a timestamped run can be resumed by name
    if main:
        paths.root.mkdir(parents=True, exist_ok=True)
        config.save_yaml(paths.root / "config.yaml")
        (paths.root / FAILURE_FILE).unlink(missing_ok=True)  # an earlier attempt's, now being resumed
    with _logging_to(paths.root / "train.log") if main else nullcontext():
        try:
            summary = _run_stages(config, ranks, paths, resume, started, on_eval)
            close_shared_engines()  # before the process group goes: a vLLM engine's shutdown takes its groups down
            ranks.leave()
            return summary
        except RunFailure as failure:
            logger.error("the run stopped: %s", failure, exc_info=failure)  # the traceback, in train.log only
            if main:
                (paths.root / FAILURE_FILE).write_text(json.dumps(failure.record(), indent=1))
                refresh_report(paths.root, config.log.alerts)
            raise


def _run_stages(
    config: Config, ranks: Ranks, paths: RunPaths, resume: ResumePoint, started: float,
    on_eval: Callable[[int, dict[str, float]], None] | None,
) -> dict[str, Any]:
    """Data, SFT, the evaluations, GRPO and the reports of a run whose folder is prepared."""
    main = ranks.is_main_process
    with ranks.main_process_first():  # tiny models and generated datasets are built once, in the shared cache
        policy_info = task_model_info(config.model, base_model_path(config, paths))  # tasks see what the model sees
        train_set = load_samples(config.data.train, config.task, paths.data, seed=config.data.seed, model=policy_info,
                                 tools=config.rollout.prompt_tools)
        test_set = SampleSet(samples=[], tasks={})  # built only for an eval the config asks for
        benches: list[BenchmarkSet] = []
        if config.eval.before or config.eval.after or config.eval.every_n_steps:
            test_set = load_samples(
                held_out_datasets(config), config.task, paths.data, seed=config.data.seed, model=policy_info,
                tools=config.rollout.prompt_tools,
            )
            benches = [bench.for_model(policy_info) for bench in held_out_benchmarks(config)]
    ledger = SkipLedger(paths.root / LEDGER_FILE if main else None)
    ledger.add(train_set.skipped, split="train", stage="load")
    ledger.add(test_set.skipped, split="test", stage="load")
    model, processor, _ = load_run_policy(config, checkpoint=resume.weights)
    _dummy_media_on_ranks(model, (train_set, test_set), ranks, tools=bool(config.rollout.tools))
    trainer: GRPOTrainer | None = None  # once built, its back end syncs decoding across ranks

    def evaluate(tag: str) -> HeldOut:
        backend = trainer.backend if trainer is not None else None
        return _evaluate(config, model, processor, test_set, benches, paths.root / "eval" / tag, ledger, backend,
                         ranks)

    def evaluate_stage(tag: str, label: str) -> None:
        """The evaluation ``label`` ("before GRPO"), kept in ``evaluations`` (its benchmarks under their own label)."""
        held_out = evaluate(tag)
        evaluations[label] = held_out.test
        if held_out.benchmarks is not None:
            evaluations[benchmarks_tag(label)] = held_out.benchmarks
        if main:
            _save_evaluations(paths.root, evaluations)

    evaluations = _load_evaluations(paths.root)
    with_sft = config.sft.enabled and config.sft.steps > 0
    if with_sft and not resume.past_sft:
        _cold_start(config, model, processor, train_set, paths.root, ledger, resume.sft_checkpoint, ranks)
        if ranks.world_size > 1:  # SFT's back end changed the module: GRPO starts from its saved result
            model, processor, _ = load_run_policy(config, checkpoint=paths.root / SFT_MODEL)
            _dummy_media_on_ranks(model, (train_set, test_set), ranks, tools=bool(config.rollout.tools))
    trainer = GRPOTrainer(  # its back end holds the policy (on some ranks made without weights: sharded loading)
        config, paths.root, model, processor, train_set,
        evaluate=lambda tag: _reported(evaluate(tag).numbers(), tag, on_eval),
        resume_from=resume.grpo,
        reference_source=_initial_policy(paths.root / SFT_MODEL if with_sft else base_model_path(config, paths)),
        skip_ledger=ledger,
    )
    if config.eval.before and resume.grpo is None and "before GRPO" not in evaluations:
        evaluate_stage("before", "before GRPO")
    grpo_started = time.perf_counter()
    trainer.train()
    grpo_seconds = time.perf_counter() - grpo_started
    if config.eval.after:
        evaluate_stage("after", "after GRPO")

    summary = _summary(evaluations, trainer, train_set, test_set, ledger, grpo_seconds, time.perf_counter() - started)
    if main:
        (paths.root / "summary.json").write_text(json.dumps(summary, indent=2))
        tables = {"Held-out evaluation": comparison_table(evaluations)} if evaluations else {}
        write_report(paths.root, read_metrics(paths.root / "metrics.jsonl"), summary, tables, skipped=ledger.records)
        refresh_report(paths.root, config.log.alerts)
    ranks.barrier()
    return summary


def _reported(
    numbers: dict[str, float], tag: str, on_eval: Callable[[int, dict[str, float]], None] | None
) -> dict[str, float]:
    """``numbers`` of the evaluation ``tag`` ("step-N"), after ``on_eval`` has seen them."""
    if on_eval is not None:
        on_eval(int(tag.removeprefix("step-")), numbers)
    return numbers


def _dummy_media_on_ranks(model: torch.nn.Module, sets: tuple[SampleSet, ...], ranks: Ranks, *, tools: bool) -> None:
    """On several ranks, rows with different kinds of media (images, none; images, videos) make a rank whose
    micro-batch (or prompts to decode) lacks a kind skip the media tower while another runs it, and the ranks'
    collectives stop matching (measured: ZeRO-2 and FSDP2 abort in the first such step). Such a run gets the
    dummy media pass (:mod:`mmgrpo.models.dummy_media`: a forward lacking a kind runs the tower on a tiny input
    at weight zero); a family whose tower mmgrpo does not know cannot run it, and its run is refused. A run with
    ``tools`` gets the pass too: a tool's images inside one rank's completions run the tower in that rank's
    continuations alone (measured: FSDP2 hung in the first backward)."""
    if ranks.world_size == 1:
        return
    if tools and install_dummy_media_pass(model) is not None:
        return
    tasks_by_media: dict[tuple[str, ...], set[str]] = {}
    for sample in (sample for samples in sets for sample in samples.samples):
        kinds = tuple(kind for kind in MODALITIES if sample.media(kind))
        tasks_by_media.setdefault(kinds, set()).add(sample.task)
    if len(tasks_by_media) > 1 and install_dummy_media_pass(model) is None:
        rows = "; ".join(
            f"{' + '.join(kinds) or 'no media'} (tasks: {', '.join(sorted(tasks))})"
            for kinds, tasks in sorted(tasks_by_media.items())
        )
        raise ValueError(
            f"rows with {rows} cannot share a run on {ranks.world_size} ranks with model type "
            f"{model.config.model_type!r}: its media tower is unknown to mmgrpo (no FamilyAdapter.tower_inputs), so a "
            "rank lacking a kind of media cannot run it; train them in one process (train.backend=single) or in "
            "separate runs"
        )


def _cold_start(  # noqa: ANN001
    config: Config, model, processor, train_set: SampleSet, run_dir: Path, ledger: SkipLedger,
    resume_from: Path | None, ranks: Ranks,
) -> None:
    """Supervised warm-up on SFT files, or on the task's reference completions of the training prompts.

    The result is saved as ``sft/model`` (where GRPO starts, and its KL reference); a stopped
    SFT leaves a checkpoint under ``sft/checkpoints`` that ``resume_from`` continues. On several
    ranks SFT trains through the run's back end (``train.backend``, with ``sft.micro_batch_size``), each rank on its
    share of every batch; only the main process writes.
    """
    main = ranks.is_main_process
    examples = sft_examples([spec.path for spec in config.sft.data], train_set)
    resume_step = checkpoint_step(resume_from) if resume_from is not None else None
    sft_log = MetricsLogger(
        run_dir / "sft", tensorboard=config.log.tensorboard, resume_step=resume_step
    ) if main else SilentMetricsLogger()
    backend = sft_backend(config, model, ranks)
    sharded = backend is not None
    try:
        run_sft(
            model, processor, examples, config.sft, budgets=media_budgets(config.model, processor), seed=config.seed,
            metrics=sft_log, progress_bar=config.log.progress_bar and main, max_prompt_len=config.data.max_prompt_tokens,
            skip_ledger=ledger,
            checkpoints=sft_checkpoints(config, run_dir / SFT_CHECKPOINTS) if main or sharded else None,
            resume_from=resume_from, cache=open_prompt_cache(config), backend=backend,
            demonstrate=demonstrator(config, model, processor),
        )
    finally:
        sft_log.close()
    weights = backend.full_state_dict() if backend is not None and backend.shards_weights else None
    if main:
        save_model(run_dir / SFT_MODEL, model, processor, weights)
        shutil.rmtree(run_dir / SFT_CHECKPOINTS, ignore_errors=True)  # superseded by sft/model
    if backend is not None:
        backend.release()
    ranks.barrier()  # sft/model is in place (a KL reference loads from it on resume)


def sft_backend(config: Config, model: torch.nn.Module, ranks: Ranks) -> TrainingBackend | None:
    """The back end SFT trains through on several ranks (``train.backend``, ``sft.micro_batch_size`` at a time);
    None in one process (SFT's own single-process back end)."""
    if ranks.world_size == 1:
        return None
    logger.info("SFT on %d ranks through train.backend=%s: each rank trains on %d of the %d examples of a step",
                ranks.world_size, config.train.backend, config.sft.batch_size // ranks.world_size, config.sft.batch_size)
    return build_backend(model, sft_optimizer_spec(config.sft),
                         dataclasses.replace(config.train, micro_batch_size=config.sft.micro_batch_size))


def sft_checkpoints(config: Config, root: Path) -> SFTCheckpoints:
    """SFT's checkpoints under ``root``, as often and as many as ``checkpoint`` says of GRPO's."""
    return SFTCheckpoints(root, config.checkpoint.every_n_steps, config.checkpoint.keep_last)


def _initial_policy(source: str | Path) -> str:
    """Where GRPO's start (its KL reference) loads from, as a checkpoint records it: local folders
    absolute, so a resume from another working directory finds them; Hub ids as they are."""
    return str(Path(source).resolve()) if Path(source).exists() else str(source)


@dataclass
class HeldOut:
    """One held-out evaluation: ``data.test``, and ``eval.benchmarks`` (None when there are none)."""

    test: EvalResult
    benchmarks: EvalResult | None

    def numbers(self) -> dict[str, float]:
        """What is logged (as ``eval/<key>``): data.test's summary, each benchmark's numbers and categories."""
        return held_out_numbers(self.test, self.benchmarks)


def _evaluate(  # noqa: ANN001
    config: Config, model, processor, test_set: SampleSet, benches: list[BenchmarkSet], out_dir: Path,
    ledger: SkipLedger, backend: TrainingBackend | None, ranks: Ranks,
) -> HeldOut:
    """The held-out evaluation of the live policy on data.test and the benchmarks, data-parallel: each rank
    generates for its block of the items and every rank gets the whole result (under ZeRO-3 and FSDP2, whose
    forward passes need every rank, the ranks decode in lockstep: :func:`~eval.runner.evaluate_policy`); the main
    process writes the files (the benchmarks' under ``out_dir/benchmarks``)."""
    engine = build_engine(config, model, processor, backend)
    options = eval_options(config)
    result = evaluate_policy(
        engine, test_set.samples, test_set.tasks, options, skipped=test_set.skipped,
        reward_policy=reward_policy(config.task), ranks=ranks, label="data.test",
    )
    parts = evaluate_benchmarks(benches, engine, options, max_new_tokens=config.eval.max_new_tokens, ranks=ranks)
    benchmarks = EvalResult.merged(parts) if parts else None
    if ranks.is_main_process:
        result.write(out_dir, model_name=out_dir.name)
        if benchmarks is not None:
            benchmarks.write(out_dir / "benchmarks", model_name=out_dir.name)
    ledger.add(result.skipped, split="test", stage="eval")
    return HeldOut(result, benchmarks)


def _summary(
    evaluations: dict[str, EvalResult], trainer: GRPOTrainer, train_set: SampleSet, test_set: SampleSet,
    ledger: SkipLedger, grpo_seconds: float, wall_seconds: float,
) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key, tag in (("accuracy_before_grpo", "before GRPO"), ("accuracy_after_grpo", "after GRPO")):
        if tag in evaluations:
            summary[key] = evaluations[tag].summary()["accuracy"]
        benchmarks = evaluations.get(benchmarks_tag(tag))
        if benchmarks is not None:
            numbers = benchmarks.summary()
            summary |= {f"{name}/{key}": numbers[f"{name}/accuracy"] for name in benchmarks.tasks()}
    if "accuracy_before_grpo" in summary and "accuracy_after_grpo" in summary:
        summary["accuracy_gain"] = summary["accuracy_after_grpo"] - summary["accuracy_before_grpo"]
    summary |= {
        "n_eval": len(test_set.samples),
        "n_train": len(train_set.samples),
        "skipped_rows": len(ledger.records),
        "skipped_rows_by_reason": ledger.counts(),
        **reward_error_summary(trainer.run_dir),
        "grpo_steps": trainer.step_index,
        "grpo_seconds": round(grpo_seconds, 1),
        "wall_seconds": round(wall_seconds, 1),
    }
    return summary


def _save_evaluations(run_dir: Path, evaluations: dict[str, EvalResult]) -> None:
    (run_dir / "evaluations.json").write_text(
        json.dumps({tag: result.to_dict() for tag, result in evaluations.items()}, indent=2, default=str)
    )


def _load_evaluations(run_dir: Path) -> dict[str, EvalResult]:
    path = run_dir / "evaluations.json"
    if not path.is_file():
        return {}
    return {tag: EvalResult.from_dict(data) for tag, data in json.loads(path.read_text()).items()}


@contextmanager
def _logging_to(path: Path) -> Iterator[None]:
    """Log INFO and above to ``path`` for the block (then stop: a later run in the same process
    must not write into this run's log)."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()

