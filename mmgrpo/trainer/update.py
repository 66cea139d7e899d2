"""The policy update of one GRPO step: mu iterations of clipped policy-gradient steps.

Completions are processed in micro-batches of whole groups (a group's prompt is
encoded once, :mod:`mmgrpo.models.shared_prefix`), gradients accumulate over the
micro-batches of a mini-batch, then one clipped optimizer step follows. Each
micro-batch's loss is weighted by its share of the mini-batch's normaliser (tokens
for ``token-mean``, sequences otherwise), so accumulation gives exactly the loss the
aggregation defines over the whole mini-batch. Under a distributed back end each rank
holds part of the mini-batch and the normaliser is summed over ranks, so the ranks'
losses add up to that same loss. Backward and the optimizer step go through the
training back end (:mod:`mmgrpo.trainer.backends`).

Every rank runs as many mini-batches and micro-batches as the rank with the most (a rank
with fewer groups, or other group sizes, repeats its first chunk at weight 0): each
backward reduces gradients across ranks, and under ZeRO-3 / FSDP2 each forward gathers
weights from all of them, so the ranks must call them equally often.
"""

from __future__ import annotations

import math
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Callable, ContextManager, Iterator, Sequence

import torch

from mmgrpo.algos import ISCorrection, importance_weights, logprob_gap, masked_mean, policy_loss
from mmgrpo.models.batch import PromptBatch, ragged_rows
from mmgrpo.models.logprobs import TokenStatistic
from mmgrpo.models.train_batch import pad_completions
from mmgrpo.models.shared_prefix import completion_logprobs
from mmgrpo.config import AlgoConfig, Config
from mmgrpo.trainer.backends import OptimizerSpec, TrainingBackend, forward_lockstep
from mmgrpo.trainer.chunks import Chunk, Part, balanced_chunks, token_budget_chunks
from mmgrpo.trainer.loss_scaling import autocast_dtype
from mmgrpo.trainer.nonfinite import blamed_on, require_finite
from mmgrpo.types import Completion, InlineMedia

TokenIds = Sequence[int]


def surrogate_options(algo: AlgoConfig) -> tuple[tuple[str, float], ...]:
    """The policy losses' own settings from ``algo`` (each loss reads the ones it has)."""
    return (("tau_pos", algo.sapo_tau_pos), ("tau_neg", algo.sapo_tau_neg), ("dppo_ratio_cap", algo.dppo_ratio_cap),
            ("dro_beta", algo.dro_beta), ("clip_cov_ratio", algo.clip_cov_ratio), ("clip_cov_lb", algo.clip_cov_lb),
            ("clip_cov_ub", algo.clip_cov_ub), ("kl_cov_ratio", algo.kl_cov_ratio), ("kl_cov_coef", algo.kl_cov_coef))


@dataclass(frozen=True)
class LossSettings:
    """Options of :func:`mmgrpo.algos.policy_loss` plus the sampling temperature."""

    surrogate: str = "vanilla"
    surrogate_options: tuple[tuple[str, float], ...] = ()  # the surrogate's own settings (sapo: tau_pos, tau_neg, ...)
    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: float | None = None
    entropy_coeff: float = 0.0
    agg: str = "token-mean"
    beta: float = 0.0
    kl: str = "k3"
    kl_clamp: float | None = None
    max_len: int | None = None
    temperature: float = 1.0
    correction: ISCorrection | None = None  # importance sampling against the sampler's log-probs; None = off

    @classmethod
    def from_config(cls, config: Config) -> LossSettings:
        algo, objective = config.algo, config.algo.objective()
        return cls(
            surrogate=objective.policy_loss,
            surrogate_options=surrogate_options(algo),
            eps_low=algo.eps_low, eps_high=algo.eps_high, dual_clip=algo.dual_clip,
            entropy_coeff=algo.entropy_coeff, agg=objective.loss_agg,
            beta=algo.beta, kl=algo.kl_estimator, kl_clamp=algo.kl_clamp,
            max_len=config.rollout.max_new_tokens, temperature=config.rollout.temperature,
            correction=None if algo.is_correction == "none" else ISCorrection(algo.is_correction, algo.is_level, algo.is_cap),
        )


@dataclass(frozen=True)
class UpdateSettings:
    """How the batch is split and stepped."""

    num_iterations: int = 1  # mu
    micro_batch_size: int = 64  # completions per forward/backward (whole groups)
    mini_batch_size: int | None = None  # completions per optimizer step; None = all
    group_shared_encoding: bool = True
    padding_free: bool = False  # sequences packed into rows without padding
    max_tokens_per_micro_batch: int | None = None  # micro-batches by token budget instead of micro_batch_size
    logprob_chunk_tokens: int = 1024  # tokens through the output head at a time
    with_entropy: bool = True
    precision: str = "fp32"  # "bf16"/"fp16": forward/backward under autocast (log-probs stay float32)
    old_logp_source: str = "trainer"  # "engine": the sampler's log-probs are the PPO ratio's old log-probs
    measure_sampler_gap: bool = False  # log how far the sampler's log-probs are from the trainer's

    @classmethod
    def from_config(cls, config: Config, world_size: int) -> UpdateSettings:
        """The split a GRPO step uses on one of ``world_size`` ranks (``train.mini_batch_size`` is global)."""
        train = config.train
        return cls(
            num_iterations=config.algo.num_iterations, micro_batch_size=train.micro_batch_size,
            mini_batch_size=train.mini_batch_size and train.mini_batch_size // world_size,
            group_shared_encoding=train.group_shared_encoding, padding_free=train.padding_free,
            max_tokens_per_micro_batch=train.max_tokens_per_micro_batch, logprob_chunk_tokens=train.logprob_chunk_tokens,
            precision=train.precision,
            old_logp_source=config.rollout.logprobs_source,
            # engines report log-probs at temperature 1 ("raw"), the trainer at rollout.temperature
            measure_sampler_gap=config.rollout.temperature == 1.0,
        )

    def autocast(self, device: torch.device) -> ContextManager:
        dtype = autocast_dtype(self.precision)
        return torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)


def grpo_optimizer_spec(config: Config) -> OptimizerSpec:
    """AdamW and its schedule over the run's optimizer steps: ``train.steps`` x mu x the mini-batches of a step."""
    train = config.train
    rollout = config.rollout.prompts_per_step * config.rollout.num_generations
    samples_per_step = train.mini_batch_size or rollout
    total_steps = train.steps * config.algo.num_iterations * math.ceil(rollout / samples_per_step)
    return OptimizerSpec(
        lr=train.lr, weight_decay=train.weight_decay, total_steps=total_steps, schedule=train.lr_schedule,
        warmup_ratio=train.warmup_ratio, betas=(train.adam_beta1, train.adam_beta2), eps=train.adam_eps,
        max_grad_norm=train.max_grad_norm, samples_per_step=samples_per_step,
    )


@dataclass
class StepBatch:
    """What the update trains on: prompts (one row per group) and their completions."""

    prompts: PromptBatch
    completions: list[TokenIds]  # [N] group after group
    group_sizes: list[int]
    advantages: torch.Tensor  # [N], or [N, Tc] per token (process rewards)
    loss_mask: torch.Tensor  # [N, Tc] 1 on completion tokens that count (e.g. not truncated)
    ref_logp: torch.Tensor | None = None  # [N, Tc]
    sampler_logp: torch.Tensor | None = None  # [N, Tc] the rollout engine's log-probs of its sampled tokens
    policy_logp: torch.Tensor | None = None  # [N, Tc] the policy's own, before the update, if a step computed them
    media: list[InlineMedia | None] | None = None  # [N] the media inside each completion (a tool's images), if any

    def select(self, rows: list[int], completions: Part) -> StepBatch:
        """Groups ``rows`` and their ``completions`` (consecutive, or by index)."""
        def take(items: list) -> list:
            return items[completions] if isinstance(completions, slice) else [items[i] for i in completions]

        return StepBatch(
            prompts=self.prompts.select(rows),
            completions=take(self.completions),
            group_sizes=[self.group_sizes[r] for r in rows],
            advantages=self.advantages[completions],
            loss_mask=self.loss_mask[completions],
            ref_logp=None if self.ref_logp is None else self.ref_logp[completions],
            sampler_logp=None if self.sampler_logp is None else self.sampler_logp[completions],
            policy_logp=None if self.policy_logp is None else self.policy_logp[completions],
            media=None if self.media is None else take(self.media),
        )

    def group_tokens(self, group_shared: bool) -> list[int]:
        """The tokens each group's forward runs: its prompt once (``group_shared``) or once per completion, and its
        completions."""
        prompt_lengths = self.prompts.attention_mask.sum(1).tolist()  # [P]
        tokens, start = [], 0
        for prompt_length, size in zip(prompt_lengths, self.group_sizes):
            completion_tokens = sum(len(c) for c in self.completions[start : start + size])
            tokens.append(prompt_length * (1 if group_shared else size) + completion_tokens)
            start += size
        return tokens


def sampler_logprobs(completions: Sequence[Completion], like: torch.Tensor) -> torch.Tensor | None:
    """The engine's log-probs of each completion's tokens, ``[N, Tc]`` shaped and placed ``like`` the
    loss mask (0 past each completion); None when some completion has none."""
    if any(c.logprobs is None for c in completions):
        return None
    filled = ragged_rows([c.logprobs for c in completions])  # [N, <= Tc]
    logp = torch.zeros(like.shape, dtype=torch.float32)
    logp[:, : filled.shape[1]][filled] = torch.tensor([v for c in completions for v in c.logprobs], dtype=torch.float32)
    return logp.to(like.device)


def build_loss_mask(completions: Sequence[Completion], include: Sequence[bool], pad_token_id: int) -> torch.Tensor:
    """``[N, Tc]`` mask of the tokens the policy sampled (not padding, not a tool's observation), with rows where
    ``include`` is False zeroed."""
    _, mask = pad_completions([c.token_ids for c in completions], pad_token_id=pad_token_id)  # [N, Tc]
    for row, completion in enumerate(completions):
        for start, end in completion.observation_spans:
            mask[row, start:end] = 0
    return mask * torch.tensor(include, dtype=mask.dtype).unsqueeze(1)


def micro_chunks(backend: TrainingBackend, batch: StepBatch, settings: UpdateSettings) -> list[Chunk]:
    """The micro-batches of ``batch``: by token budget when one is set, else by completion count."""
    if settings.max_tokens_per_micro_batch is None:
        return balanced_chunks(backend, batch.group_sizes, settings.micro_batch_size)
    return token_budget_chunks(backend, batch.group_sizes, batch.group_tokens(settings.group_shared_encoding),
                               settings.max_tokens_per_micro_batch)


def batch_logprobs(
    model: torch.nn.Module,
    backend: TrainingBackend,
    batch: StepBatch,
    settings: UpdateSettings,
    temperature: float,
    context: Callable[[], ContextManager] = nullcontext,
    statistic: TokenStatistic | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``[N, Tc]`` of every completion without grad, in eval mode (no dropout): the reference policy's,
    or the sampling policy's before an update (0 past each completion); and ``statistic`` of each token's
    distribution ``[N, Tc]`` from the same forward (None without one)."""
    logp = torch.zeros(batch.loss_mask.shape, device=batch.loss_mask.device)  # [N, Tc]
    stat = torch.zeros_like(logp) if statistic else None
    with torch.no_grad(), context(), settings.autocast(batch.advantages.device), _eval_mode(model):
        for chunk in micro_chunks(backend, batch, settings):
            micro = batch.select(chunk.rows, chunk.part)
            micro_logp, micro_stat = completion_logprobs(
                model, micro.prompts, micro.completions, micro.group_sizes,
                group_shared_encoding=settings.group_shared_encoding, padding_free=settings.padding_free,
                micro_batch_size=len(micro.completions), temperature=temperature, statistic=statistic,
                chunk_size=settings.logprob_chunk_tokens, lockstep=forward_lockstep(backend),
                media=micro.media,
            )  # [n, width]
            if chunk.counts:
                logp[chunk.part, : micro_logp.shape[1]] = micro_logp.float()
                if stat is not None:
                    stat[chunk.part, : micro_stat.shape[1]] = micro_stat.float()
    return logp, stat


def policy_update(
    backend: TrainingBackend,
    batch: StepBatch,
    loss_settings: LossSettings,
    settings: UpdateSettings,
) -> dict[str, float]:
    """Run mu iterations over ``batch`` (this rank's part); returns stats averaged over
    micro-batches (by weight) of all ranks."""
    model = backend.model
    one_pass = settings.num_iterations == 1 and _single_mini_batch(batch, settings)
    from_engine = settings.old_logp_source == "engine" and batch.sampler_logp is not None
    # With one optimizer step per batch the sampling policy IS the current one: ratio = 1.
    old_logp = batch.sampler_logp if from_engine else None
    if old_logp is None and not one_pass:
        old_logp = batch.policy_logp
    if old_logp is None and not one_pass:
        old_logp, _ = batch_logprobs(model, backend, batch, settings, loss_settings.temperature)
    sampled = batch.sampler_logp is not None
    correction = loss_settings.correction if sampled else None
    masks_tokens = correction is not None and correction.mode == "mis"
    compared = sampled and (settings.measure_sampler_gap or correction is not None)
    # The sampler is compared with the policy before this step's update: in one pass, the forwards of the
    # update itself as they run; else (and when MIS must drop tokens before the update) the trainer's old
    # log-probs, one more forward when the ratio's old log-probs are the engine's or there are none yet.
    before = None
    if compared and (not one_pass or masks_tokens):
        before = old_logp if old_logp is not None and not from_engine else batch_logprobs(
            model, backend, batch, settings, loss_settings.temperature
        )[0]
    first_logp = torch.zeros_like(batch.loss_mask, dtype=torch.float32) if compared and before is None else None
    as_sampled = batch
    if masks_tokens:  # dropped tokens leave the loss and its normaliser
        _, keep, _ = importance_weights(before, batch.sampler_logp, batch.loss_mask, correction)
        batch = replace(batch, loss_mask=batch.loss_mask * keep)
    totals: dict[str, float] = defaultdict(float)
    steps = 0
    for _ in range(settings.num_iterations):
        for chunk in balanced_chunks(backend, batch.group_sizes, settings.mini_batch_size or len(batch.completions)):
            mini = batch.select(chunk.rows, chunk.part)
            mini_old = None if old_logp is None else old_logp[chunk.part]
            kept = first_logp[chunk.part] if first_logp is not None and chunk.counts else None
            stats, suspects = _accumulate_gradients(
                backend, mini, mini_old, loss_settings, settings, counts=chunk.counts, keep_logp=kept
            )
            # the loss is summed over the ranks: every rank stops here together, before the update
            require_finite("loss", stats.get("loss", 0.0), suspects or mini.prompts.sample_ids)
            for name, value in stats.items():
                totals[name] += value
            totals["lr"] += backend.optimizer.param_groups[0]["lr"]
            with blamed_on(mini.prompts.sample_ids):
                totals["grad_norm"] += backend.step()
            steps += 1
    metrics = {name: value / steps for name, value in totals.items()}
    if compared:
        trainer_logp = before if before is not None else first_logp
        metrics |= _sampler_comparison(backend, as_sampled, trainer_logp, settings.measure_sampler_gap, correction)
    return metrics


def _sampler_comparison(
    backend: TrainingBackend, batch: StepBatch, trainer_logp: torch.Tensor, gap: bool, correction: ISCorrection | None
) -> dict[str, float]:
    """Over this step's tokens on all ranks: ``rollout/logprob_gap_mean`` / ``_max`` (|trainer - sampler|
    log-prob) when ``gap``, and the importance ratios ``rollout/is_ratio_mean`` / ``_max`` and the share
    the cap truncated or dropped, ``rollout/is_capped_frac``, under ``correction``."""
    tokens = float(batch.loss_mask.sum())
    means, maxima = {"tokens": tokens}, {}
    if gap:
        found = logprob_gap(batch.sampler_logp, trainer_logp, batch.loss_mask)
        means["rollout/logprob_gap_mean"] = float(found["mean"]) * tokens
        maxima["rollout/logprob_gap_max"] = float(found["max"])
    if correction is not None:
        _, _, ratios = importance_weights(trainer_logp, batch.sampler_logp, batch.loss_mask, correction)
        means["rollout/is_ratio_mean"] = float(ratios["ratio_mean"]) * tokens
        means["rollout/is_capped_frac"] = float(ratios["capped_frac"]) * tokens
        maxima["rollout/is_ratio_max"] = float(ratios["ratio_max"])
    summed = backend.ranks.all_reduce(means)
    total = max(summed.pop("tokens"), 1.0)
    return {name: value / total for name, value in summed.items()} | backend.ranks.all_reduce(maxima, "max")


def _accumulate_gradients(
    backend: TrainingBackend,
    batch: StepBatch,
    old_logp: torch.Tensor | None,
    loss_settings: LossSettings,
    settings: UpdateSettings,
    *,
    counts: bool = True,
    keep_logp: torch.Tensor | None = None,
) -> tuple[dict[str, float], list[str]]:
    """Backward every micro-batch of ``batch`` (at weight 0 unless it ``counts``); returns the
    weighted stats of all ranks' parts and the prompt ids of this rank's first micro-batch whose
    loss was not finite (none: []). ``keep_logp`` (``[n, Tc]``), when given, receives the
    log-probs of the forward passes (before this mini-batch's optimizer step)."""
    local = _normaliser(batch.loss_mask, loss_settings.agg) if counts else 0.0
    normaliser = backend.ranks.all_reduce({"normaliser": local})["normaliser"]
    stats: dict[str, float] = defaultdict(float)
    suspects: list[str] = []
    if normaliser == 0:  # every completion masked out (e.g. all truncated)
        return stats, suspects
    for chunk in micro_chunks(backend, batch, settings):
        micro = batch.select(chunk.rows, chunk.part)
        part = chunk.part
        # weight 0 still runs: every rank must run the same forward and backward passes
        weight = _normaliser(micro.loss_mask, loss_settings.agg) / normaliser if counts and chunk.counts else 0.0
        with settings.autocast(micro.advantages.device):
            logp, entropy = completion_logprobs(
                backend.model, micro.prompts, micro.completions, micro.group_sizes,
                group_shared_encoding=settings.group_shared_encoding, padding_free=settings.padding_free,
                micro_batch_size=len(micro.completions), chunk_size=settings.logprob_chunk_tokens,
                lockstep=forward_lockstep(backend),
                statistic=_entropy_statistic(settings, loss_settings), temperature=loss_settings.temperature,
                media=micro.media,
            )  # [n, Tc]
        width = logp.shape[1]
        if keep_logp is not None and chunk.counts:
            keep_logp[part, :width] = logp.detach().float()
        mask = micro.loss_mask[:, :width]
        old = logp.detach() if old_logp is None else old_logp[part][:, :width]
        ref = None if micro.ref_logp is None else micro.ref_logp[:, :width]
        is_weights = None
        if loss_settings.correction is not None and micro.sampler_logp is not None:
            is_weights, _, _ = importance_weights(old, micro.sampler_logp[:, :width], mask, loss_settings.correction)
        advantages = micro.advantages if micro.advantages.dim() == 1 else micro.advantages[:, :width]
        loss, loss_stats = policy_loss(
            logp, old, advantages, mask,
            eps_low=loss_settings.eps_low, eps_high=loss_settings.eps_high, dual_clip=loss_settings.dual_clip,
            agg=loss_settings.agg, ref_logp=ref, beta=loss_settings.beta, kl=loss_settings.kl,
            kl_clamp=loss_settings.kl_clamp, max_len=loss_settings.max_len, token_weights=is_weights,
            surrogate=loss_settings.surrogate, surrogate_options=dict(loss_settings.surrogate_options), entropy=entropy, entropy_coeff=loss_settings.entropy_coeff,
        )
        backend.backward(loss * weight)
        value = float(loss.detach())
        if not (suspects or math.isfinite(value)):
            suspects = list(micro.prompts.sample_ids)
        stats["loss"] += value * weight
        for name, value in loss_stats.items():
            stats[name] += float(value) * weight
        if entropy is not None:
            stats["entropy"] += float(masked_mean(entropy.detach(), mask.bool())) * weight
    return backend.ranks.all_reduce(stats), suspects


def _normaliser(loss_mask: torch.Tensor, agg: str) -> float:
    """What ``agg`` divides by: tokens for token-mean, sequences with a token otherwise."""
    if agg == "token-mean":
        return float(loss_mask.sum())
    return float(loss_mask.any(dim=1).sum())


def _entropy_statistic(settings: UpdateSettings, loss_settings: LossSettings) -> TokenStatistic | None:
    """The entropy the update computes: with its gradient only where an entropy bonus is in the loss."""
    if not settings.with_entropy:
        return None
    return "differentiable_entropy" if loss_settings.entropy_coeff else "entropy"


def _single_mini_batch(batch: StepBatch, settings: UpdateSettings) -> bool:
    return settings.mini_batch_size is None or settings.mini_batch_size >= len(batch.completions)


@contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
