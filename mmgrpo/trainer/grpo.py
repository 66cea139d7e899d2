"""The GRPO trainer: sample -> score -> advantages -> update -> sync, one step at a time.

Orchestration only: rollouts come from a registered engine (:mod:`mmgrpo.rollout`),
rewards from the task (:mod:`tasks`), advantages and losses from :mod:`mmgrpo.algos`,
log-probs from :mod:`mmgrpo.models`. The loop is :meth:`GRPOTrainer.train`; one step is
:meth:`GRPOTrainer.step`.

Data parallelism (a back end with several ranks): every rank keeps the same prompt
sampler and draws the step's global prompts, then trains on its own contiguous share,
so a group never straddles ranks and a checkpoint's data position holds for any number
of ranks. The ranks exchange their rollouts' summaries (no media) each step, so metrics,
skipped rows, reward errors and completion logs cover all ranks; only the main process
writes files.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from mmgrpo.config import Config
from mmgrpo.inputs import SampleSet
from mmgrpo.models.dummy_media import install_dummy_media_pass, installed_dummy_media_pass
from mmgrpo.models.prompt_cache import hit_rate_metrics, open_prompt_cache
from mmgrpo.models.special_tokens import tokenizer_of
from mmgrpo.reports.alerts import StepMonitor
from mmgrpo.reports.html import refresh_report
from mmgrpo.skipped_rows import LEDGER_FILE, SkipLedger
from mmgrpo.trainer.backends import build_backend
from mmgrpo.trainer.checkpoint import (
    TrainerState, capture_rng_state, checkpoint_on_failure, load_trainer_state, remove_stale_staging, restore_rng_state,
    retire_checkpoints_after, save_checkpoint, save_last_finished,
)
from mmgrpo.trainer.interrupts import signals_allowed, signals_deferred
from mmgrpo.trainer.kl_reference import make_reference
from mmgrpo.trainer.metrics import MetricsLogger, SilentMetricsLogger
from mmgrpo.trainer.nonfinite import naming_rows
from mmgrpo.trainer.prompt_drawer import DrawerState, PromptDrawer
from mmgrpo.trainer.reward_errors import record_reward_errors
from mmgrpo.trainer.rollout_source import SourceContext, start_rollout_source
from mmgrpo.trainer.rollouts import Rollouts, collect_rollouts
from mmgrpo.trainer.setup import scoring_rule
from mmgrpo.trainer.step_batch import StepBatchBuilder
from mmgrpo.trainer.step_metrics import advantage_metrics, completion_records, rollout_metrics, step_timing
from mmgrpo.trainer.update import (
    LossSettings,
    UpdateSettings,
    batch_logprobs,
    grpo_optimizer_spec,
    policy_update,
)

logger = logging.getLogger(__name__)

Evaluator = Callable[[str], dict[str, float]]  # tag -> metrics, run on the live policy


class GRPOTrainer:
    """Trains ``model`` with GRPO on ``train_set`` as ``config`` says, writing into ``run_dir``.

    ``reference_source`` is where the initial policy (``model`` as given, e.g. after SFT) can
    be loaded from: with ``algo.beta > 0`` and full fine-tuning it is the frozen KL reference,
    and a resumed run rebuilds the reference from there (a checkpoint records it).
    """

    def __init__(
        self,
        config: Config,
        run_dir: Path,
        model: torch.nn.Module,
        processor: Any,
        train_set: SampleSet,
        *,
        evaluate: Evaluator | None = None,
        resume_from: Path | None = None,
        reference_source: str | Path | None = None,
        skip_ledger: SkipLedger | None = None,
    ) -> None:
        self.config, self.run_dir, self.model, self.processor = config, run_dir, model, processor
        self.evaluate = evaluate
        self.scoring = {name: scoring_rule(config, task) for name, task in train_set.tasks.items()}
        resumed = load_trainer_state(resume_from) if resume_from is not None else None
        recorded = resumed.reference if resumed is not None else None  # a run keeps its first reference
        self.reference_source = recorded or (str(reference_source) if reference_source is not None else None)
        self.reference = make_reference(config, model, self.reference_source, fresh=resumed is None)
        self.backend = build_backend(model, grpo_optimizer_spec(config), config.train)
        if self.reference is not None and self.reference.module is not model:  # sharded like the policy
            self.reference.module = self.backend.prepare_frozen(self.reference.module)
            if installed_dummy_media_pass(model) is not None:  # the reference runs the policy's forwards
                install_dummy_media_pass(self.reference.module)
        self.optimizer, self.scheduler = self.backend.optimizer, self.backend.scheduler
        self.loss_settings = LossSettings.from_config(config)
        self.update_settings = UpdateSettings.from_config(config, self.backend.ranks.world_size)
        self.drawer = PromptDrawer(
            config, train_set, skip_ledger if skip_ledger is not None else SkipLedger(run_dir / LEDGER_FILE),
            rank=self.backend.ranks.rank, world_size=self.backend.ranks.world_size,
        )
        self.step_index = 0
        self.saved_step: int | None = None  # the step of the newest checkpoint this trainer wrote
        self.restored_rollouts: list[dict[str, Any]] = []  # rounds sampled ahead that the checkpoint kept
        if resumed is not None:
            self._restore(resumed, resume_from)
        reward_weights = {name: rule.weights for name, rule in self.scoring.items()}
        self.batches = StepBatchBuilder(config, model, processor, reward_weights)
        self.rollout_source = start_rollout_source(SourceContext(  # from the restored weights
            config, model, processor, self.backend, self.drawer, self.scoring, self.batches.encode, run_dir,
            self.step_index, self.restored_rollouts,
        ))
        if not self.rollout_source.needs_loaded_media:  # the trainer's prompt batches also feed a sync engine
            self.batches.prompt_cache = open_prompt_cache(config)
        self.monitor = StepMonitor(config.log.alerts)  # training-health warnings in the log
        self.metrics = MetricsLogger(
            run_dir, tensorboard=config.log.tensorboard, wandb=config.log.wandb,
            wandb_project=config.log.wandb_project, run_name=run_dir.name, config=config.to_dict(),
            resume_step=self.step_index if resumed is not None else None,
        ) if self.backend.ranks.is_main_process else SilentMetricsLogger()

    # -- the loop ---------------------------------------------------------------------
    def train(self) -> None:
        """Run until ``train.steps``, then save the final checkpoint.

        A stop request (Ctrl-C, SIGTERM: :class:`~mmgrpo.trainer.interrupts.Interrupted`) or
        an error inside a step saves the checkpoint of the last finished step, then propagates.
        """
        cfg = self.config
        progress = _progress_bar(
            cfg.train.steps, self.step_index, enabled=cfg.log.progress_bar and self.backend.ranks.is_main_process
        )
        finished = self._finished_state()
        try:
            with checkpoint_on_failure(lambda failure: self._save_last_finished(finished, failure)):
                while self.step_index < cfg.train.steps:
                    with signals_deferred():  # a step's weight update, its count and its record are one
                        metrics = self.step()
                        self.step_index += 1
                        finished = self._finished_state()
                        self._log_step(metrics)
                    progress.update(1)
                    progress.set_postfix(
                        reward=f"{metrics['reward/total']:.3f}", kl=f"{metrics.get('kl', 0.0):.4f}",
                        s=f"{metrics['time/step']:.2f}",
                    )
                    # The last step's checkpoint and report come after the loop (the report with the
                    # final evaluation, from the pipeline).
                    last = self.step_index == cfg.train.steps
                    every = cfg.checkpoint.every_n_steps
                    if every and self.step_index % every == 0 and not last:
                        self.save()
                    every = cfg.log.report_every_n_steps
                    if every and self.step_index % every == 0 and not last and self.backend.ranks.is_main_process:
                        refresh_report(self.run_dir, cfg.log.alerts)
                self.save()
        finally:
            progress.close()
            self.metrics.close()
            self.close()

    def close(self) -> None:
        """Stop the rollout source (an asynchronous worker; ``train`` does so when it ends)."""
        self.rollout_source.close()

    def _log_step(self, metrics: dict[str, float]) -> None:
        """Log the step just finished, with an eval when one is due (a stop may cut the eval short:
        the row is written without it)."""
        every = self.config.eval.every_n_steps
        try:
            if every and self.step_index % every == 0 and self.evaluate:
                with signals_allowed():
                    metrics |= {f"eval/{k}": v for k, v in self.evaluate(f"step-{self.step_index}").items()}
        finally:
            self.metrics.log(self.step_index, metrics)
            if self.backend.ranks.is_main_process:
                for alert in self.monitor.observe(self.step_index, metrics):
                    logger.warning("step %d: %s", alert.step, alert.message)

    def _finished_state(self) -> _Finished:
        """What changes during a step besides the weights, as of the last finished step."""
        return _Finished(
            drawer=self.drawer.snapshot(), rng=capture_rng_state(), optimizer_steps=self.scheduler.last_epoch,
            unconsumed=self._unconsumed(),
        )

    def _save_last_finished(self, finished: _Finished, failure: BaseException) -> None:
        """The emergency checkpoint: the state after the last finished step, if the weights still are.
        Several ranks save together only on a stop request (every rank gets the signal): after an
        error on one rank the others are elsewhere, and a collective save would wait for them."""
        if self.backend.ranks.world_size > 1 and not isinstance(failure, KeyboardInterrupt):
            logger.error("rank %d failed during step %d: no emergency checkpoint with %d ranks; resume from the "
                         "last saved one", self.backend.ranks.rank, self.step_index + 1, self.backend.ranks.world_size)
            return
        if self.saved_step == self.step_index:
            logger.warning("stopped during step %d: step %d is already saved", self.step_index + 1, self.step_index)
            return

        def save() -> Path:
            self.drawer.restore(finished.drawer)  # undo what the broken step drew, counted and skipped
            self.backend.zero_grad()
            return self.save(rng=finished.rng, unconsumed=finished.unconsumed)

        save_last_finished(
            failure, self.step_index, save, weights_intact=self.scheduler.last_epoch == finished.optimizer_steps
        )

    def step(self) -> dict[str, float]:
        """One GRPO step; returns its metrics. A stop request waits while the weights are updated."""
        cfg = self.config
        started = time.perf_counter()
        backend = self.backend
        cache = self.batches.prompt_cache
        cache_before = cache.stats.snapshot() if cache is not None else None
        with signals_allowed():  # collecting rollouts changes nothing a checkpoint keeps: a stop may cut it
            self.model.eval()
            rollouts = collect_rollouts(
                lambda round_index: self.rollout_source.next_round(self.step_index, round_index),
                num_prompts=cfg.rollout.prompts_per_step // backend.ranks.world_size,
                dynamic_sampling=cfg.algo.dynamic_sampling, max_resample_rounds=cfg.algo.max_resample_rounds,
                all_ranks_full=backend.ranks.all_ranks,
            )
            parts = backend.ranks.gather(rollouts.summary())  # every rank's groups, in rank order, no media
            everyone = Rollouts.merged(parts)
            self.drawer.record(everyone, step=self.step_index + 1, write_ledger=backend.ranks.is_main_process)
            if backend.ranks.is_main_process:
                record_reward_errors(self.run_dir, self.step_index + 1, everyone.reward_errors)
            metrics = rollout_metrics(everyone) | self.rollout_source.step_metrics(everyone.groups, self.step_index)
            if not backend.ranks.all_ranks(bool(rollouts.groups)):
                logger.warning("step %d: a rank has no informative group to train on", self.step_index + 1)
                rollout_done = time.perf_counter()
                return metrics | step_timing(started, rollout_done, rollout_done, rollout_done)
            # advantages and the training batch count as rollout time
            batch, advantages = self.batches.step_batch(rollouts, parts, backend, self.update_settings,
                                                        self.loss_settings.correction)
            rollout_done = time.perf_counter()
            if self.reference is not None:
                batch.ref_logp, _ = batch_logprobs(
                    self.reference.module, backend, batch, self.update_settings, cfg.rollout.temperature,
                    self.reference.context,
                )
            reference_done = time.perf_counter()
        self.model.train()
        # a stop request waits for the weights to be whole again
        with signals_deferred(), naming_rows(rollouts.samples, stage="GRPO", step=self.step_index + 1):
            self.rollout_source.before_update()
            metrics |= policy_update(self.backend, batch, self.loss_settings, self.update_settings)
            metrics |= self.backend.precision_metrics()
            self.rollout_source.publish_weights()
        metrics |= advantage_metrics(advantages)
        if cache_before is not None:
            metrics |= hit_rate_metrics(cache.stats.since(cache_before))
        metrics |= backend.ranks.all_reduce(step_timing(started, rollout_done, reference_done, time.perf_counter()), "max")
        metrics["tokens_per_second"] = metrics["length/total"] / metrics["time/step"]
        if backend.ranks.is_main_process:
            self._maybe_log_completions(everyone, advantages)
        return metrics

    # -- pieces of a step ----------------------------------------------------------------
    def _unconsumed(self) -> list[dict[str, Any]]:
        """Rollout batches drawn but not trained on (in flight to the worker, or restored and not yet
        requested), oldest first: a checkpoint records them and a resumed run requests them first."""
        return [request.to_dict() for request in [*self.rollout_source.in_flight(), *self.drawer.pending]]

    def _maybe_log_completions(self, rollouts: Rollouts, advantages: torch.Tensor) -> None:
        """At step 1 and every ``log.log_completions_every`` steps, the first ``log.completions_per_log``
        completions (whole groups first) with what a report shows of them: the prompt's text and media
        references, the answer, each reward component and the advantage."""
        every, step = self.config.log.log_completions_every, self.step_index + 1
        if not every or (step % every and step != 1):  # a run shorter than `every` still shows samples
            return
        records = completion_records(rollouts, advantages, step, tokenizer_of(self.processor))
        self.metrics.log_completions(records[: self.config.log.completions_per_log])

    # -- optimisation and checkpoints ---------------------------------------------------------
    def save(self, *, rng: dict[str, Any] | None = None, unconsumed: list[dict[str, Any]] | None = None) -> Path:
        """Checkpoint the current step on every rank (``rng``: the generator state to record, default
        the current one; ``unconsumed``: the rollout batches drawn and not trained on, default the current
        ones; the rounds already sampled of them are kept too)."""
        unconsumed = self._unconsumed() if unconsumed is None else unconsumed
        sampled = self.rollout_source.recorded_rollouts([batch["batch"] for batch in unconsumed])
        extra = self.drawer.checkpoint_extra(self.backend.ranks.gather(unconsumed))
        state = TrainerState(
            step=self.step_index,
            scheduler=self.scheduler.state_dict(),
            data=self.drawer.sampler.state_dict(),
            extra=extra | {SAMPLED_BATCHES: self.backend.ranks.gather(sampled)},
            reference=self.reference_source,
        )
        path = save_checkpoint(
            self.run_dir / "checkpoints", self.model, self.processor, state,
            keep_last=self.config.checkpoint.keep_last, rng=rng, backend=self.backend,
        )
        self.saved_step = self.step_index
        return path

    def _own_sampled_batches(self, recorded: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """This rank's rounds sampled ahead, when as many ranks saved them as run now (each rank's rounds
        belong to its share of the prompts); otherwise none, and the batches in flight are sampled anew."""
        ranks = self.backend.ranks
        if len(recorded) == ranks.world_size:
            return recorded[ranks.rank]
        if any(recorded):
            logger.warning("the checkpoint's batches in flight were sampled on %d rank(s), this run has %d: they "
                           "are sampled anew", len(recorded), ranks.world_size)
        return []

    def _restore(self, state: TrainerState, checkpoint_dir: Path) -> None:
        """Optimizer, scheduler, data position, RNG and step (weights were loaded with the model);
        this run's checkpoints after the resumed step belong to an abandoned timeline and are moved aside."""
        self.backend.load_optimizer(checkpoint_dir, state.optimizer)
        self.scheduler.load_state_dict(state.scheduler)
        self.drawer.load_checkpoint(state.data, state.extra, step=state.step)
        self.restored_rollouts = self._own_sampled_batches(state.extra.get(SAMPLED_BATCHES, []))
        restore_rng_state(state.rng_of(self.backend.ranks.rank, self.backend.ranks.world_size))
        self.step_index = state.step
        if checkpoint_dir.resolve().parent == (self.run_dir / "checkpoints").resolve():
            self.saved_step = state.step
        if self.backend.ranks.is_main_process:
            retire_checkpoints_after(self.run_dir / "checkpoints", state.step)
            remove_stale_staging(self.run_dir / "checkpoints")  # a killed save's leftovers: free the disk now
        self.backend.ranks.barrier()
        logger.info("resumed from %s at step %d", checkpoint_dir, state.step)


SAMPLED_BATCHES = "sampled_batches"  # per saving rank: the rounds of its batches in flight, already sampled


@dataclass
class _Finished:
    """The state after the last finished step that a step changes besides the weights."""

    drawer: DrawerState
    rng: dict[str, Any]
    optimizer_steps: int  # scheduler.last_epoch: moves with each optimizer step
    unconsumed: list[dict[str, Any]]  # rollout batches drawn and not trained on


def _progress_bar(total: int, initial: int, *, enabled: bool) -> tqdm:
    return tqdm(total=total, initial=initial, disable=not enabled, desc="GRPO", dynamic_ncols=True)
