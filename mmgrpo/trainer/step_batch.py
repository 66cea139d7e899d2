"""From a rank's scored rollouts to what its policy update trains on: each prompt encoded once (through
the prompt cache when the rollout engine allows it), group-relative advantages (plus process-reward token
advantages), the loss mask and the sampler's log-probs."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from mmgrpo.algos import group_advantages, overlong_penalty
from mmgrpo.algos.token_baseline import TokenStatistics
from mmgrpo.config import Config
from mmgrpo.inputs import media_budgets
from mmgrpo.models.adapters import unwrap_model
from mmgrpo.models.batch import PromptBatch, build_prompt_batch
from mmgrpo.models.prompt_cache import PromptCache
from mmgrpo.models.special_tokens import tokenizer_of
from mmgrpo.models.token_text import TokenTextEnds
from mmgrpo.trainer.process_steps import step_advantages
from mmgrpo.trainer.rollouts import Rollouts
from mmgrpo.trainer.update import StepBatch, build_loss_mask, sampler_logprobs
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

    def token_advantages(self, rollouts: Rollouts, statistics: TokenStatistics) -> torch.Tensor:
        """This rank's completions' per-token advantages ``[N, Tc]`` (a token-level estimator: its groups are whole
        on this rank), from the policy's ``statistics``."""
        algo = self.config.algo
        return group_advantages(
            rollouts.rewards(), rollouts.group_sizes, estimator=algo.objective().advantage_estimator,
            eps=algo.advantage_eps, token_statistics=statistics,
        )

    def build(self, rollouts: Rollouts, advantages: torch.Tensor) -> StepBatch:
        """This rank's training batch of ``rollouts`` with their ``advantages`` ``[N]``."""
        algo, device = self.config.algo, next(self.model.parameters()).device
        completions = rollouts.completions
        token_ids = [c.token_ids for c in completions]
        prompts = rollouts.prompt_batch(self.encode)
        include = [not (algo.mask_truncated and c.truncated) for c in completions]
        loss_mask = build_loss_mask(token_ids, include, prompts.pad_token_id).to(device)
        if algo.process_reward_weight != 0:
            process = step_advantages(  # [N, Tc]
                rollouts, self.token_text_ends, loss_mask.shape[1], scale_std=algo.scale_std, eps=algo.advantage_eps
            )
            if process is not None:  # some completion has steps
                advantages = advantages[:, None] + algo.process_reward_weight * process  # [N, Tc]
        return StepBatch(
            prompts=prompts.to(device), completions=token_ids, group_sizes=rollouts.group_sizes,
            advantages=advantages.to(device), loss_mask=loss_mask, sampler_logp=sampler_logprobs(completions, loss_mask),
        )
