"""The GRPO trainer: sample -> score -> advantages -> update -> sync, one step at a time.

Orchestration only: rollouts come from a registered engine (:mod:`mmgrpo.rollout`),
rewards from the task (:mod:`tasks`), advantages and losses from :mod:`mmgrpo.algos`,
log-probs from :mod:`mmgrpo.models`. The loop is :meth:`GRPOTrainer.train`; one step is
:meth:`GRPOTrainer.step`.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from mmgrpo.algos import group_advantages
from mmgrpo.config import Config
from mmgrpo.models.adapters import unwrap_model
from mmgrpo.models.batch import PromptBatch, build_prompt_batch
from mmgrpo.rollout.base import RolloutEngine
from mmgrpo.trainer.checkpoint import TrainerState, capture_rng_state, load_trainer_state, restore_rng_state, save_checkpoint
from mmgrpo.trainer.group_sizes import GroupSizeTracker
from mmgrpo.trainer.metrics import MetricsLogger
from mmgrpo.trainer.optim import build_optimizer, build_scheduler
from mmgrpo.trainer.prompt_sampler import PromptSampler
from mmgrpo.trainer.rollouts import Rollouts, collect_rollouts
from mmgrpo.trainer.setup import SampleSet, build_engine, media_budgets, sampling_params, scoring_rule
from mmgrpo.trainer.step_metrics import rollout_metrics
from mmgrpo.trainer.update import LossSettings, StepBatch, UpdateSettings, batch_logprobs, build_loss_mask, policy_update

logger = logging.getLogger(__name__)

Evaluator = Callable[[str], dict[str, float]]  # tag -> metrics, run on the live policy


class GRPOTrainer:
    """Trains ``model`` with GRPO on ``train_set`` as ``config`` says, writing into ``run_dir``."""

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
    ) -> None:
        self.config, self.run_dir, self.model, self.processor = config, run_dir, model, processor
        self.samples = train_set.samples
        self.evaluate = evaluate
        self.budgets = media_budgets(config.model, processor)
        self.engine: RolloutEngine = build_engine(config, model, processor)
        self.sampler = PromptSampler(
            len(self.samples), config.data.seed, weights=train_set.weights, shuffle=config.data.shuffle
        )
        self.group_sizes = GroupSizeTracker(
            g_min=config.algo.group_size_min, g_max=config.algo.group_size_max,
            budget_per_prompt=config.rollout.num_generations,
        )
        self.scoring = {name: scoring_rule(config, task) for name, task in train_set.tasks.items()}
        self.reference = self._make_reference()
        self.optimizer = build_optimizer(
            model, lr=config.train.lr, weight_decay=config.train.weight_decay,
            betas=(config.train.adam_beta1, config.train.adam_beta2), eps=config.train.adam_eps,
        )
        self.scheduler = build_scheduler(
            self.optimizer, total_steps=self._total_optimizer_steps(),
            warmup_ratio=config.train.warmup_ratio, schedule=config.train.lr_schedule,
        )
        self.step_index = 0
        if resume_from is not None:
            self._restore(resume_from)
        self.metrics = MetricsLogger(
            run_dir, tensorboard=config.log.tensorboard, wandb=config.log.wandb,
            wandb_project=config.log.wandb_project, run_name=run_dir.name, config=config.to_dict(),
            resume_step=self.step_index if resume_from is not None else None,
        )
        self.interrupted = False

    # -- the loop ---------------------------------------------------------------------
    def train(self) -> None:
        """Run until ``train.steps``; Ctrl-C saves a checkpoint and returns cleanly."""
        cfg = self.config
        progress = _progress_bar(cfg.train.steps, self.step_index, enabled=cfg.log.progress_bar)
        finished = self._resumable_state()
        try:
            while self.step_index < cfg.train.steps:
                metrics = self.step()
                self.step_index += 1
                finished = self._resumable_state()
                if cfg.eval.every_n_steps and self.step_index % cfg.eval.every_n_steps == 0 and self.evaluate:
                    metrics |= {f"eval/{k}": v for k, v in self.evaluate(f"step-{self.step_index}").items()}
                self.metrics.log(self.step_index, metrics)
                progress.update(1)
                progress.set_postfix(
                    reward=f"{metrics['reward/total']:.3f}", kl=f"{metrics.get('kl', 0.0):.4f}",
                    s=f"{metrics['time/step']:.2f}",
                )
                every = cfg.checkpoint.every_n_steps
                if every and self.step_index % every == 0 and self.step_index < cfg.train.steps:
                    self.save()
        except KeyboardInterrupt:
            # The checkpoint describes the last finished step: undo what the broken step drew.
            self.sampler.load_state_dict(finished[0])
            restore_rng_state(finished[1])
            self.interrupted = True
            logger.warning("interrupted during step %d: saving the checkpoint of step %d", self.step_index + 1, self.step_index)
        finally:
            progress.close()
        self.save()
        self.metrics.close()

    def _resumable_state(self) -> tuple[dict, dict]:
        """Data position and RNG after the last finished step (what a checkpoint must record)."""
        return self.sampler.state_dict(), capture_rng_state()

    def step(self) -> dict[str, float]:
        """One GRPO step; returns its metrics."""
        cfg = self.config
        started = time.perf_counter()
        self.model.eval()
        rollouts = collect_rollouts(
            self.engine, self._encode, self.sampler_take, self._group_sizes_for, self.scoring,
            sampling_params(cfg, seed=cfg.seed * 100_003 + self.step_index),
            num_prompts=cfg.rollout.prompts_per_step, dynamic_sampling=cfg.algo.dynamic_sampling,
            max_resample_rounds=cfg.algo.max_resample_rounds,
        )
        self._record_successes(rollouts)
        metrics = rollout_metrics(rollouts)
        if not rollouts.groups:
            logger.warning("step %d: no informative group to train on", self.step_index + 1)
            rollout_done = time.perf_counter()
            return metrics | _timing(started, rollout_done, rollout_done, rollout_done)
        batch = self._step_batch(rollouts)  # advantages and the training batch count as rollout time
        rollout_done = time.perf_counter()
        if self.reference is not None:
            batch.ref_logp = batch_logprobs(
                self.reference.module, batch, self._update_settings(), cfg.rollout.temperature, self.reference.context
            )
        reference_done = time.perf_counter()
        self.model.train()
        metrics |= policy_update(self.model, self.optimizer, self.scheduler, batch, self._loss_settings(), self._update_settings())
        self.engine.update_weights(self.model)
        metrics |= _advantage_metrics(batch.advantages)
        metrics |= _timing(started, rollout_done, reference_done, time.perf_counter())
        metrics["tokens_per_second"] = metrics["length/total"] / metrics["time/step"]
        self._maybe_log_completions(rollouts)
        return metrics

    # -- pieces of a step ----------------------------------------------------------------
    def sampler_take(self, count: int) -> list:
        return [self.samples[i] for i in self.sampler.take(count)]

    def _encode(self, samples: list) -> PromptBatch:
        return build_prompt_batch(
            self.processor, samples, self.budgets, family=_model_type(self.model),
            max_prompt_len=self.config.data.max_prompt_tokens,
        )

    def _group_sizes_for(self, samples: list) -> list[int]:
        if self.config.algo.dynamic_group_size:
            return self.group_sizes.sizes(samples)
        return [self.config.rollout.num_generations] * len(samples)

    def _step_batch(self, rollouts: Rollouts) -> StepBatch:
        cfg = self.config
        rewards = rollouts.rewards()  # [N]
        advantages = group_advantages(
            rewards, rollouts.group_sizes, estimator=cfg.algo.advantage_estimator,
            scale_std=cfg.algo.scale_std, scale=cfg.algo.scale, eps=cfg.algo.advantage_eps,
        )  # [N]
        completions = rollouts.completions
        token_ids = [c.token_ids for c in completions]
        prompts = rollouts.prompt_batch(self._encode)
        include = [not (cfg.algo.mask_truncated and c.truncated) for c in completions]
        return StepBatch(
            prompts=prompts.to(_device(self.model)),
            completions=token_ids,
            group_sizes=rollouts.group_sizes,
            advantages=advantages.to(_device(self.model)),
            loss_mask=build_loss_mask(token_ids, include, prompts.pad_token_id).to(_device(self.model)),
        )

    def _loss_settings(self) -> LossSettings:
        algo = self.config.algo
        return LossSettings(
            eps_low=algo.eps_low, eps_high=algo.eps_high, dual_clip=algo.dual_clip, agg=algo.loss_agg,
            beta=algo.beta, kl=algo.kl_estimator, kl_clamp=algo.kl_clamp,
            max_len=self.config.rollout.max_new_tokens, temperature=self.config.rollout.temperature,
        )

    def _update_settings(self) -> UpdateSettings:
        train = self.config.train
        return UpdateSettings(
            num_iterations=self.config.algo.num_iterations, micro_batch_size=train.micro_batch_size,
            mini_batch_size=train.mini_batch_size, max_grad_norm=train.max_grad_norm,
            group_shared_encoding=train.group_shared_encoding, precision=train.precision,
        )

    def _record_successes(self, rollouts: Rollouts) -> None:
        for group in [*rollouts.groups, *rollouts.filtered]:
            self.group_sizes.record(group.sample.id, group.successes())

    def _maybe_log_completions(self, rollouts: Rollouts) -> None:
        every = self.config.log.log_completions_every
        if not every or (self.step_index + 1) % every:
            return
        with open(self.run_dir / "completions.jsonl", "a", encoding="utf-8") as handle:
            for group in rollouts.groups[: self.config.log.completions_per_log]:
                for completion, reward in zip(group.completions, group.rewards):
                    record = {"step": self.step_index + 1, "sample_id": group.sample.id, "answer": group.sample.answer,
                              "completion": completion.text, "reward": reward, "truncated": completion.truncated}
                    handle.write(json.dumps(record, default=str) + "\n")

    # -- reference model ------------------------------------------------------------------
    def _make_reference(self) -> _Reference | None:
        """None when beta = 0; the LoRA base (adapters off) or a frozen copy otherwise."""
        if self.config.algo.beta == 0:
            return None
        if self.config.lora.enabled:
            return _Reference(self.model, self.model.disable_adapter)
        frozen = copy.deepcopy(self.model).eval()
        frozen.requires_grad_(False)
        return _Reference(frozen, nullcontext)

    # -- checkpoints ------------------------------------------------------------------------
    def _total_optimizer_steps(self) -> int:
        cfg = self.config
        rollout = cfg.rollout.prompts_per_step * cfg.rollout.num_generations
        per_iteration = math.ceil(rollout / (cfg.train.mini_batch_size or rollout))
        return cfg.train.steps * cfg.algo.num_iterations * per_iteration

    def save(self) -> Path:
        state = TrainerState(
            step=self.step_index,
            optimizer=self.optimizer.state_dict(),
            scheduler=self.scheduler.state_dict(),
            data=self.sampler.state_dict(),
            extra={"group_sizes": self.group_sizes.state_dict()},
        )
        return save_checkpoint(
            self.run_dir / "checkpoints", self.model, self.processor, state, keep_last=self.config.checkpoint.keep_last
        )

    def _restore(self, checkpoint_dir: Path) -> None:
        """Optimizer, scheduler, data position, RNG and step (weights were loaded with the model)."""
        state = load_trainer_state(checkpoint_dir)
        self.optimizer.load_state_dict(state.optimizer)
        self.scheduler.load_state_dict(state.scheduler)
        self.sampler.load_state_dict(state.data)
        self.group_sizes.load_state_dict(state.extra["group_sizes"])
        restore_rng_state(state.rng)
        self.step_index = state.step
        logger.info("resumed from %s at step %d", checkpoint_dir, state.step)


class _Reference:
    """The frozen reference policy: a module and the context under which it is the reference."""

    def __init__(self, module: torch.nn.Module, context: Callable[[], Any]) -> None:
        self.module, self.context = module, context


def _advantage_metrics(advantages: torch.Tensor) -> dict[str, float]:
    return {
        "advantage/mean": float(advantages.mean()),
        "advantage/std": float(advantages.std()) if advantages.numel() > 1 else 0.0,
        "advantage/abs_max": float(advantages.abs().max()),
    }


def _timing(started: float, rollout_done: float, reference_done: float, finished: float) -> dict[str, float]:
    return {
        "time/rollout": rollout_done - started,
        "time/reference": reference_done - rollout_done,
        "time/update": finished - reference_done,
        "time/step": finished - started,
    }


def _model_type(model: torch.nn.Module) -> str:
    return unwrap_model(model).config.model_type


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _progress_bar(total: int, initial: int, *, enabled: bool) -> tqdm:
    return tqdm(total=total, initial=initial, disable=not enabled, desc="GRPO", dynamic_ncols=True)
