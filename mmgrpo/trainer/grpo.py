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
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from mmgrpo.algos import group_advantages
from mmgrpo.config import Config
from mmgrpo.models.adapters import unwrap_model
from mmgrpo.models.batch import PromptBatch, build_prompt_batch
from mmgrpo.models.prompt_cache import hit_rate_metrics, open_prompt_cache
from mmgrpo.models.special_tokens import tokenizer_of
from mmgrpo.models.token_text import TokenTextEnds
from mmgrpo.reports.alerts import StepMonitor
from mmgrpo.reports.html import refresh_report
from mmgrpo.rollout.base import RolloutEngine, SamplingParams
from mmgrpo.trainer.async_rollouts import AsyncRollouts, RolloutRequest, ranks_share
from mmgrpo.trainer.backends import build_backend
from mmgrpo.trainer.checkpoint import (
    TrainerState, capture_rng_state, load_trainer_state, remove_stale_staging, restore_rng_state,
    retire_checkpoints_after, save_checkpoint, save_last_finished,
)
from mmgrpo.trainer.group_sizes import GroupSizeTracker
from mmgrpo.trainer.kl_reference import make_reference
from mmgrpo.trainer.interrupts import signals_allowed, signals_deferred, stop_on_signals
from mmgrpo.trainer.metrics import MetricsLogger, SilentMetricsLogger
from mmgrpo.trainer.nonfinite import naming_rows
from mmgrpo.trainer.prompt_sampler import PromptSampler
from mmgrpo.trainer.reward_errors import record_reward_errors
from mmgrpo.skipped_rows import LEDGER_FILE, SkipLedger, describe_skipped
from mmgrpo.trainer.rollout_worker import RolloutWorker, WorkerSpec, warn_if_stale_uncorrected, worker_model_dir
from mmgrpo.trainer.rollouts import (
    Rollouts, collect_rollouts, draw_usable, rank_advantages, sample_round, with_round_seed,
)
from mmgrpo.inputs import SampleSet, media_budgets
from mmgrpo.trainer.setup import build_engine, sampling_params, scoring_rule
from mmgrpo.trainer.process_steps import step_advantages
from mmgrpo.trainer.step_metrics import (
    advantage_metrics, completion_records, rollout_metrics, staleness_metrics, step_timing,
)
from mmgrpo.trainer.update import (
    LossSettings, StepBatch, UpdateSettings, batch_logprobs, build_loss_mask, grpo_optimizer_spec, policy_update,
    sampler_logprobs,
)

logger = logging.getLogger(__name__)

_RANK_SEED_STRIDE = 1_000_003  # rank r samples with seed + r * this: ranks draw different tokens
_STEP_SEED_STRIDE = 100_003  # step (rollout batch) s samples with seed * this + s
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
        self.samples = train_set.samples
        self.skip_ledger = skip_ledger if skip_ledger is not None else SkipLedger(run_dir / LEDGER_FILE)
        self.skipped_ids = self.skip_ledger.ids("train")  # left out by SFT or GRPO so far: never drawn again
        self.evaluate = evaluate
        self.budgets = media_budgets(config.model, processor)
        self.sampler = PromptSampler(
            len(self.samples), config.data.seed, weights=train_set.weights, shuffle=config.data.shuffle
        )
        self.group_sizes = GroupSizeTracker(
            g_min=config.algo.group_size_min, g_max=config.algo.group_size_max,
            budget_per_prompt=config.rollout.num_generations,
        )
        self.scoring = {name: scoring_rule(config, task) for name, task in train_set.tasks.items()}
        resumed = load_trainer_state(resume_from) if resume_from is not None else None
        recorded = resumed.reference if resumed is not None else None  # a run keeps its first reference
        self.reference_source = recorded or (str(reference_source) if reference_source is not None else None)
        self.reference = make_reference(config, model, self.reference_source, fresh=resumed is None)
        self.backend = build_backend(model, grpo_optimizer_spec(config), config.train)
        if self.reference is not None and self.reference.module is not model:  # sharded like the policy
            self.reference.module = self.backend.prepare_frozen(self.reference.module)
        self.optimizer, self.scheduler = self.backend.optimizer, self.backend.scheduler
        self.loss_settings = LossSettings.from_config(config)
        self.update_settings = UpdateSettings.from_config(config, self.backend.world_size)
        self.step_index = 0
        self.saved_step: int | None = None  # the step of the newest checkpoint this trainer wrote
        self.batches_drawn = 0  # rollout batches drawn so far (an async worker's requests are named by it)
        self.pending: deque[RolloutRequest] = deque()  # drawn before a resume, never trained on: requested first
        if resumed is not None:
            self._restore(resumed, resume_from)
        self.engine: RolloutEngine | None = None  # sync mode samples in this process; async in a worker's
        self.async_rollouts: AsyncRollouts | None = None
        if config.rollout.mode == "async":
            self.async_rollouts = self._start_async_rollouts()  # from the restored weights
        else:
            self.engine = build_engine(config, model, processor, self.backend)
        # The trainer's prompt batches also feed a sync engine: one that needs loaded media gets no cached ones.
        uses_loaded_media = self.engine is not None and self.engine.needs_loaded_media
        self.prompt_cache = None if uses_loaded_media else open_prompt_cache(config)
        self.token_text_ends = TokenTextEnds(tokenizer_of(processor))  # places process-reward steps on tokens
        self.monitor = StepMonitor(config.log.alerts)  # training-health warnings in the log
        self.metrics = MetricsLogger(
            run_dir, tensorboard=config.log.tensorboard, wandb=config.log.wandb,
            wandb_project=config.log.wandb_project, run_name=run_dir.name, config=config.to_dict(),
            resume_step=self.step_index if resumed is not None else None,
        ) if self.backend.is_main_process else SilentMetricsLogger()

    # -- the loop ---------------------------------------------------------------------
    def train(self) -> None:
        """Run until ``train.steps``, then save the final checkpoint.

        A stop request (Ctrl-C, SIGTERM: :class:`~mmgrpo.trainer.interrupts.Interrupted`) or
        an error inside a step saves the checkpoint of the last finished step, then propagates.
        """
        cfg = self.config
        progress = _progress_bar(
            cfg.train.steps, self.step_index, enabled=cfg.log.progress_bar and self.backend.is_main_process
        )
        finished = self._finished_state()
        try:
            with stop_on_signals():
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
                    if every and self.step_index % every == 0 and not last and self.backend.is_main_process:
                        refresh_report(self.run_dir, cfg.log.alerts)
                self.save()
        except (KeyboardInterrupt, Exception) as failure:
            self._save_last_finished(finished, failure)
            raise
        finally:
            progress.close()
            self.metrics.close()
            self.close()

    def close(self) -> None:
        """Stop the asynchronous rollout worker, if there is one (``train`` does so when it ends)."""
        if self.async_rollouts is not None:
            self.async_rollouts.close()

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
            if self.backend.is_main_process:
                for alert in self.monitor.observe(self.step_index, metrics):
                    logger.warning("step %d: %s", alert.step, alert.message)

    def _finished_state(self) -> _Finished:
        """What changes during a step besides the weights, as of the last finished step."""
        return _Finished(
            sampler=self.sampler.state_dict(), group_sizes=self.group_sizes.state_dict(), rng=capture_rng_state(),
            optimizer_steps=self.scheduler.last_epoch, skipped_ids=set(self.skipped_ids),
            unconsumed=self._unconsumed(), batches_drawn=self.batches_drawn,
        )

    def _save_last_finished(self, finished: _Finished, failure: BaseException) -> None:
        """The emergency checkpoint: the state after the last finished step, if the weights still are.
        Several ranks save together only on a stop request (every rank gets the signal): after an
        error on one rank the others are elsewhere, and a collective save would wait for them."""
        if self.backend.world_size > 1 and not isinstance(failure, KeyboardInterrupt):
            logger.error("rank %d failed during step %d: no emergency checkpoint with %d ranks; resume from the "
                         "last saved one", self.backend.rank, self.step_index + 1, self.backend.world_size)
            return
        if self.saved_step == self.step_index:
            logger.warning("stopped during step %d: step %d is already saved", self.step_index + 1, self.step_index)
            return

        def save() -> Path:
            self.sampler.load_state_dict(finished.sampler)  # undo what the broken step drew and counted
            self.group_sizes.load_state_dict(finished.group_sizes)
            self.skipped_ids = finished.skipped_ids  # the broken step's skips are found again on resume
            self.batches_drawn = finished.batches_drawn
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
        cache_before = self.prompt_cache.stats.snapshot() if self.prompt_cache is not None else None
        with signals_allowed():  # collecting rollouts changes nothing a checkpoint keeps: a stop may cut it
            self.model.eval()
            rollouts = collect_rollouts(
                self.async_rollouts.next_round if self.async_rollouts is not None else self._sample_here,
                num_prompts=cfg.rollout.prompts_per_step // backend.world_size,
                dynamic_sampling=cfg.algo.dynamic_sampling, max_resample_rounds=cfg.algo.max_resample_rounds,
                all_ranks_full=backend.all_ranks,
            )
            parts = backend.gather_objects(rollouts.summary())  # every rank's groups, in rank order, no media
            everyone = Rollouts.merged(parts)
            self._record_successes(everyone)
            if backend.is_main_process:
                record_reward_errors(self.run_dir, self.step_index + 1, everyone.reward_errors)
            self._record_skipped(everyone)
            metrics = rollout_metrics(everyone)
            if self.async_rollouts is not None:
                metrics |= staleness_metrics(everyone.groups, self.step_index, cfg.rollout.max_staleness)
                metrics["async/worker_seconds"] = self.async_rollouts.take_worker_seconds()
            if not backend.all_ranks(bool(rollouts.groups)):
                logger.warning("step %d: a rank has no informative group to train on", self.step_index + 1)
                rollout_done = time.perf_counter()
                return metrics | step_timing(started, rollout_done, rollout_done, rollout_done)
            advantages, mine = rank_advantages(parts, backend.rank, self._advantages)
            batch = self._step_batch(rollouts, mine)  # advantages and the training batch count as rollout time
            rollout_done = time.perf_counter()
            if self.reference is not None:
                batch.ref_logp = batch_logprobs(
                    self.reference.module, backend, batch, self.update_settings, cfg.rollout.temperature,
                    self.reference.context,
                )
            reference_done = time.perf_counter()
        self.model.train()
        # a stop request waits for the weights to be whole again
        with signals_deferred(), naming_rows(rollouts.samples, stage="GRPO", step=self.step_index + 1):
            metrics |= policy_update(self.backend, batch, self.loss_settings, self.update_settings)
            metrics |= self.backend.precision_metrics()
            self._sync_weights()
        metrics |= advantage_metrics(advantages)
        if cache_before is not None:
            metrics |= hit_rate_metrics(self.prompt_cache.stats.since(cache_before))
        metrics |= backend.all_reduce(step_timing(started, rollout_done, reference_done, time.perf_counter()), "max")
        metrics["tokens_per_second"] = metrics["length/total"] / metrics["time/step"]
        if backend.is_main_process:
            self._maybe_log_completions(everyone, advantages)
        return metrics

    # -- pieces of a step ----------------------------------------------------------------
    def _sample_here(self, round_index: int) -> Rollouts:
        """One round of the step's rollouts, sampled in this process by its engine."""
        request = self.draw_request()
        samples = [self.samples[i] for i in request.indices]
        params = with_round_seed(self._batch_params(self.step_index), round_index)
        return sample_round(self.engine, self._encode(samples), samples, request.group_sizes, self.scoring, params)

    def draw_request(self) -> RolloutRequest:
        """The next rollout batch of this rank: one drawn before a resume and never trained on, else
        the sampler's next prompts with their group sizes."""
        if self.pending:
            return self.pending.popleft()
        indices = self._draw_indices(self.config.rollout.prompts_per_step // self.backend.world_size)
        sizes = self._group_sizes_for([self.samples[i] for i in indices])
        self.batches_drawn += 1
        return RolloutRequest(self.batches_drawn - 1, tuple(indices), tuple(sizes))

    def sampler_take(self, count: int) -> list:
        """This rank's ``count`` of the next prompts (see :meth:`_draw_indices`)."""
        return [self.samples[i] for i in self._draw_indices(count)]

    def _draw_indices(self, count: int) -> list[int]:
        """This rank's ``count`` of the next prompt indices, passing over those skipped earlier in the
        run: every rank draws all ranks' prompts (same sampler, same skips) and keeps its own share."""
        unusable = {i for i, sample in enumerate(self.samples) if sample.id in self.skipped_ids}
        if len(unusable) == len(self.samples):
            raise RuntimeError(f"every training sample was skipped; see {self.skip_ledger.path}")
        drawn = draw_usable(self.sampler.take, count * self.backend.world_size, unusable)
        return drawn[self.backend.rank * count : (self.backend.rank + 1) * count]

    def _unconsumed(self) -> list[dict[str, Any]]:
        """Rollout batches drawn but not trained on (in flight to the worker, or restored and not yet
        requested), oldest first: a checkpoint records them and a resumed run requests them first."""
        in_flight = list(self.async_rollouts.in_flight) if self.async_rollouts is not None else []
        return [request.to_dict() for request in [*in_flight, *self.pending]]

    def _start_async_rollouts(self) -> AsyncRollouts:
        """A rollout worker process on a copy of the current policy, sampling ahead of training."""
        cfg = self.config
        model_dir = (worker_model_dir(self.model, self.processor, self.run_dir, self.backend.shards_weights)
                     if self.backend.is_main_process else None)
        spec = WorkerSpec(
            config=cfg.to_dict(), model_dir=self.backend.broadcast_object(model_dir),  # written once, read by every rank's worker
            device=cfg.rollout.worker_device or str(_device(self.model)), scoring=self.scoring,
        )
        warn_if_stale_uncorrected(cfg)
        worker = RolloutWorker(spec, self.backend.whole_weights(), version=self.step_index)
        return AsyncRollouts(
            worker, self.draw_request, self.samples, self._batch_params,
            max_staleness=cfg.rollout.max_staleness, version=self.step_index,
        )

    def _batch_params(self, batch: int) -> SamplingParams:
        """This rank's sampling parameters of rollout batch ``batch`` (sync mode's step ``batch``)."""
        seed = self.config.seed * _STEP_SEED_STRIDE + batch + self.backend.rank * _RANK_SEED_STRIDE
        return sampling_params(self.config, seed=seed)

    def _sync_weights(self) -> None:
        """After an optimizer step, the sampler samples from the new weights."""
        if self.async_rollouts is not None:
            self.async_rollouts.push_weights(self.backend.whole_weights())
        else:
            self.engine.update_weights(self.model)

    def _record_skipped(self, rollouts: Rollouts) -> None:
        """Samples left out of this step go to the ledger, are named, and are not drawn again."""
        if not rollouts.skipped:
            return
        self.skipped_ids.update(row.row_id for row in rollouts.skipped)
        if self.backend.is_main_process:
            self.skip_ledger.add(rollouts.skipped, split="train", stage="grpo")
        logger.warning("step %d: skipped %d prompt(s): %s", self.step_index + 1, len(rollouts.skipped),
                       describe_skipped(rollouts.skipped))

    def _encode(self, samples: list) -> PromptBatch:
        return build_prompt_batch(
            self.processor, samples, self.budgets, family=_model_type(self.model),
            max_prompt_len=self.config.data.max_prompt_tokens, cache=self.prompt_cache,
        )

    def _group_sizes_for(self, samples: list) -> list[int]:
        if self.config.algo.dynamic_group_size:
            return self.group_sizes.sizes(samples)
        return [self.config.rollout.num_generations] * len(samples)

    def _advantages(self, rollouts: Rollouts) -> torch.Tensor:
        algo = self.config.algo
        return group_advantages(
            rollouts.rewards(), rollouts.group_sizes, estimator=algo.advantage_estimator,
            scale_std=algo.scale_std, scale=algo.scale, eps=algo.advantage_eps,
        )  # [N]

    def _step_batch(self, rollouts: Rollouts, advantages: torch.Tensor) -> StepBatch:
        """This rank's training batch of ``rollouts`` with their ``advantages`` ``[N]``."""
        cfg = self.config
        completions = rollouts.completions
        token_ids = [c.token_ids for c in completions]
        prompts = rollouts.prompt_batch(self._encode)
        include = [not (cfg.algo.mask_truncated and c.truncated) for c in completions]
        loss_mask = build_loss_mask(token_ids, include, prompts.pad_token_id).to(_device(self.model))
        process = self._process_advantages(rollouts, loss_mask.shape[1])  # [N, Tc] or None
        if process is not None:
            advantages = advantages[:, None] + cfg.algo.process_reward_weight * process  # [N, Tc]
        return StepBatch(
            prompts=prompts.to(_device(self.model)),
            completions=token_ids,
            group_sizes=rollouts.group_sizes,
            advantages=advantages.to(_device(self.model)),
            loss_mask=loss_mask,
            sampler_logp=sampler_logprobs(completions, loss_mask),
        )

    def _process_advantages(self, rollouts: Rollouts, length: int) -> torch.Tensor | None:
        """Token advantages ``[N, length]`` of the process rewards' steps; None when no completion has
        steps or ``algo.process_reward_weight`` is 0."""
        if self.config.algo.process_reward_weight == 0:
            return None
        algo = self.config.algo
        return step_advantages(rollouts, self.token_text_ends, length, scale_std=algo.scale_std, eps=algo.advantage_eps)

    def _record_successes(self, rollouts: Rollouts) -> None:
        for group in [*rollouts.groups, *rollouts.filtered]:
            self.group_sizes.record(group.sample.id, group.successes())

    def _maybe_log_completions(self, rollouts: Rollouts, advantages: torch.Tensor) -> None:
        """At step 1 and every ``log.log_completions_every`` steps, the first ``log.completions_per_log``
        completions (whole groups first) with what a report shows of them: the prompt's text and media
        references, the answer, each reward component and the advantage."""
        every, step = self.config.log.log_completions_every, self.step_index + 1
        if not every or (step % every and step != 1):  # a run shorter than `every` still shows samples
            return
        records = completion_records(rollouts, advantages, step)
        self.metrics.log_completions(records[: self.config.log.completions_per_log])

    # -- optimisation and checkpoints ---------------------------------------------------------
    def save(self, *, rng: dict[str, Any] | None = None, unconsumed: list[dict[str, Any]] | None = None) -> Path:
        """Checkpoint the current step on every rank (``rng``: the generator state to record, default
        the current one; ``unconsumed``: the rollout batches drawn and not trained on, default the current ones)."""
        state = TrainerState(
            step=self.step_index,
            scheduler=self.scheduler.state_dict(),
            data=self.sampler.state_dict(),
            extra={
                "group_sizes": self.group_sizes.state_dict(), "skipped_sample_ids": sorted(self.skipped_ids),
                "unconsumed_batches": self.backend.gather_objects(self._unconsumed() if unconsumed is None else unconsumed),
                "batches_drawn": self.batches_drawn,
            },
            reference=self.reference_source,
        )
        path = save_checkpoint(
            self.run_dir / "checkpoints", self.model, self.processor, state,
            keep_last=self.config.checkpoint.keep_last, rng=rng, backend=self.backend,
        )
        self.saved_step = self.step_index
        return path

    def _restore(self, state: TrainerState, checkpoint_dir: Path) -> None:
        """Optimizer, scheduler, data position, RNG and step (weights were loaded with the model);
        this run's checkpoints after the resumed step belong to an abandoned timeline and are moved aside."""
        self.backend.load_optimizer(checkpoint_dir, state.optimizer)
        self.scheduler.load_state_dict(state.scheduler)
        self.sampler.load_state_dict(state.data)
        self.group_sizes.load_state_dict(state.extra["group_sizes"])
        self.skipped_ids = set(state.extra.get("skipped_sample_ids", []))
        self.pending = deque(ranks_share(state.extra.get("unconsumed_batches", []), self.backend.rank,
                                         self.backend.world_size))
        self.batches_drawn = int(state.extra.get("batches_drawn", state.step))
        restore_rng_state(state.rng)
        self.step_index = state.step
        if checkpoint_dir.resolve().parent == (self.run_dir / "checkpoints").resolve():
            self.saved_step = state.step
        if self.backend.is_main_process:
            retire_checkpoints_after(self.run_dir / "checkpoints", state.step)
            remove_stale_staging(self.run_dir / "checkpoints")  # a killed save's leftovers: free the disk now
        self.backend.barrier()
        logger.info("resumed from %s at step %d", checkpoint_dir, state.step)


@dataclass
class _Finished:
    """The state after the last finished step that a step changes besides the weights."""

    sampler: dict[str, Any]
    group_sizes: dict[str, Any]
    rng: dict[str, Any]
    optimizer_steps: int  # scheduler.last_epoch: moves with each optimizer step
    skipped_ids: set[str]  # samples left out so far (never drawn again)
    unconsumed: list[dict[str, Any]]  # rollout batches drawn and not trained on
    batches_drawn: int


def _model_type(model: torch.nn.Module) -> str:
    return unwrap_model(model).config.model_type


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _progress_bar(total: int, initial: int, *, enabled: bool) -> tqdm:
    return tqdm(total=total, initial=initial, disable=not enabled, desc="GRPO", dynamic_ncols=True)
