"""From a rank's scored rollouts to what its policy update trains on: each prompt encoded once (through
the prompt cache when the rollout engine allows it), group-relative advantages (plus process-reward token
advantages), the loss mask and the sampler's log-probs."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from mmgrpo.algos import ISCorrection, group_advantages, importance_weights, masked_mean, overlong_penalty
from mmgrpo.algos.token_baseline import TOKEN_LEVEL_ESTIMATORS, TokenStatistics
from mmgrpo.config import Config
from mmgrpo.inputs import media_budgets
from mmgrpo.models.adapters import unwrap_model
from mmgrpo.models.batch import PromptBatch, build_prompt_batch
from mmgrpo.models.prompt_cache import PromptCache
from mmgrpo.models.special_tokens import tokenizer_of
from mmgrpo.models.token_text import TokenTextEnds
from mmgrpo.trainer.process_steps import step_advantages
from mmgrpo.trainer.backends import TrainingBackend
from mmgrpo.trainer.rollouts import Rollouts, rank_advantages
from mmgrpo.trainer.update import StepBatch, UpdateSettings, batch_logprobs, build_loss_mask, sampler_logprobs
from mmgrpo.types import Sample


class StepBatchBuilder:
    """Encodes prompts and assembles training batches for ``model`` (read at each call: a back end may
    have moved or wrapped it since)."""

    def __init__(self, config: Config, model: torch.nn.Module, processor: Any,
                 reward_weights: Mapping[str, Mapping[str, float]]) -> None:
        self.config, self.model, self.processor = config, model, processor
        self.reward_weights = reward_weights  # each task's reward weights (gdpo normalises each reward apart)
        self.budgets = media_budgets(config.model, processor)
        self.token_text_ends = TokenTextEnds(tokenizer_of(processor))  # places process-reward steps on tokens
        self.prompt_cache: PromptCache | None = None  # set once the rollout source allows cached media

    def encode(self, samples: list[Sample]) -> PromptBatch:
        return build_prompt_batch(
            self.processor, samples, self.budgets, family=unwrap_model(self.model).config.model_type,
            max_prompt_len=self.config.data.max_prompt_tokens, cache=self.prompt_cache,
        )

    def advantages(self, rollouts: Rollouts) -> torch.Tensor:
        """Each completion's advantage in its group, ``[N]`` (``algo.advantage_estimator``)."""
        algo = self.config.algo
        estimator = algo.objective().advantage_estimator
        components, weights = (rollouts.reward_components(self.reward_weights, self._overlong_penalties(rollouts))
                               if estimator == "gdpo" else (None, None))
        return group_advantages(
            rollouts.rewards(), rollouts.group_sizes, estimator=estimator, scale_std=algo.scale_std, scale=algo.scale,
            eps=algo.advantage_eps, lengths=rollouts.lengths(), components=components, component_weights=weights,
            baselines=rollouts.greedy_rewards(),
        )

    def _overlong_penalties(self, rollouts: Rollouts) -> torch.Tensor | None:
        """DAPO's overlong penalty of each completion ``[N]`` (part of its total reward), None when off."""
        algo = self.config.algo
        if algo.overlong_buffer <= 0:
            return None
        return overlong_penalty(rollouts.lengths(), self.config.rollout.max_new_tokens, algo.overlong_buffer,
                                algo.overlong_penalty)

    def step_batch(self, rollouts: Rollouts, parts: Sequence[Rollouts], backend: TrainingBackend,
                   settings: UpdateSettings, correction: ISCorrection | None) -> tuple[StepBatch, torch.Tensor]:
        """This rank's training batch of ``rollouts`` with their advantages, and every rank's advantage of each
        completion ``[N_all]`` (``parts``: every rank's rollouts, in rank order), for the step's metrics."""
        if self.config.algo.objective().advantage_estimator in TOKEN_LEVEL_ESTIMATORS:
            return self._token_level_batch(rollouts, backend, settings, correction)
        advantages, mine = rank_advantages(parts, backend.ranks.rank, self.advantages)
        return self.build(rollouts, mine), advantages

    def _token_level_batch(self, rollouts: Rollouts, backend: TrainingBackend, settings: UpdateSettings,
                           correction: ISCorrection | None) -> tuple[StepBatch, torch.Tensor]:
        """Per-token advantages from the policy's token statistics (one forward, whose log-probs the update reuses
        as its old ones; a token-level estimator's groups are whole on this rank), and every rank's per-completion
        mean advantage ``[N_all]``."""
        batch = self.build(rollouts, torch.zeros(len(rollouts.completions)))  # process rewards' part only
        logp, sum_pi_squared = batch_logprobs(
            backend.model, backend, batch, settings, self.config.rollout.temperature, statistic="sum_pi_squared",
        )
        weights = None
        if correction is not None and batch.sampler_logp is not None:
            weights, _, _ = importance_weights(logp, batch.sampler_logp.to(logp.device), batch.loss_mask, correction)
        algo = self.config.algo
        tokens = group_advantages(
            rollouts.rewards(), rollouts.group_sizes, estimator=algo.objective().advantage_estimator,
            eps=algo.advantage_eps, token_statistics=TokenStatistics(logp, sum_pi_squared, batch.loss_mask, weights),
        ).to(batch.loss_mask.device)  # [N, Tc]
        batch.advantages = tokens + (batch.advantages if batch.advantages.dim() == 2 else batch.advantages[:, None])
        batch.policy_logp = logp
        mean = masked_mean(batch.advantages, batch.loss_mask, dim=-1).cpu()
        return batch, torch.cat(backend.ranks.gather(mean))

    def build(self, rollouts: Rollouts, advantages: torch.Tensor) -> StepBatch:
        """This rank's training batch of ``rollouts`` with their ``advantages`` ``[N]``."""
        algo, device = self.config.algo, next(self.model.parameters()).device
        completions = rollouts.completions
        token_ids = [c.token_ids for c in completions]
        prompts = rollouts.prompt_batch(self.encode)
        include = [not (algo.mask_truncated and c.truncated) for c in completions]
        loss_mask = build_loss_mask(completions, include, prompts.pad_token_id).to(device)
        if algo.process_reward_weight != 0:
            process = step_advantages(  # [N, Tc]
                rollouts, self.token_text_ends, loss_mask.shape[1], scale_std=algo.scale_std, eps=algo.advantage_eps
            )
            if process is not None:  # some completion has steps
                advantages = advantages[:, None] + algo.process_reward_weight * process  # [N, Tc]
        return StepBatch(
            prompts=prompts.to(device), completions=token_ids, group_sizes=rollouts.group_sizes,
            advantages=advantages.to(device), loss_mask=loss_mask, sampler_logp=sampler_logprobs(completions, loss_mask),
            media=[c.media for c in completions] if any(c.media is not None for c in completions) else None,
        )
