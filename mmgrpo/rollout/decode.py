"""Group-shared decoding: prefill each prompt (and its media) once, branch G continuations.

One forward encodes the P left-padded prompts, vision towers included, into a KV
cache. The cache rows are then repeated, prompt i ``group_sizes[i]`` times, and an
incremental loop decodes all N = sum(group_sizes) completions together, one token per
row per step, with positions continued by the family's adapter
(:mod:`mmgrpo.models.adapters`).
Versus ``model.generate(num_return_sequences=G)``, the prompt and media are encoded P
instead of N times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from mmgrpo.models.adapters import FamilyAdapter
from mmgrpo.rollout import sampling
from mmgrpo.rollout.base import SamplingParams


@dataclass(frozen=True)
class StopRule:
    """When a completion ends and what fills it afterwards."""

    stop_ids: torch.Tensor
    """Ids that end a completion (kept as its last token)."""
    pad_id: int
    """Filler after a row's stop token."""
    forbidden_ids: tuple[int, ...] = ()
    """Ids never sampled (media placeholders, chat markers)."""


@dataclass(frozen=True)
class DecodedTokens:
    """Sampled tokens of N completions, padded to the longest."""

    token_ids: torch.Tensor  # [N, T], pad_id after each row's stop token
    logprobs: torch.Tensor  # [N, T], float32; meaningless after the stop token


@torch.no_grad()
def decode_shared_prompts(
    model: torch.nn.Module,
    prompt_inputs: Mapping[str, torch.Tensor],
    group_sizes: Sequence[int],
    params: SamplingParams,
    *,
    stop: StopRule,
    adapter: FamilyAdapter,
    generator: torch.Generator | None = None,
) -> DecodedTokens:
    """Sample ``group_sizes[i]`` completions of prompt i, the rows of prompt i adjacent.

    ``prompt_inputs`` is one left-padded batch of P prompts (``input_ids``,
    ``attention_mask``, media tensors) as the model's forward takes it.
    """
    attention_mask = prompt_inputs["attention_mask"]  # [P, L]
    prefill_positions, next_positions = adapter.prompt_positions(model, prompt_inputs)  # [..., P, L], [P]
    cache = DynamicCache(config=model.config)
    prefill = model(
        **prompt_inputs, position_ids=prefill_positions, cache=cache, use_cache=True, logits_to_keep=1
    )
    rows = torch.repeat_interleave(
        torch.arange(len(group_sizes), device=attention_mask.device),
        torch.tensor(group_sizes, device=attention_mask.device),
    )  # [N]: prompt index of each completion row
    cache.reorder_cache(rows)
    logits = prefill.logits[:, -1][rows]  # [N, V]
    attention_mask, next_positions = attention_mask[rows], next_positions[rows]  # [N, L], [N]

    finished = torch.zeros(len(rows), dtype=torch.bool, device=rows.device)  # [N]
    stop_ids = stop.stop_ids.to(rows.device)
    step_tokens, step_logprobs = [], []
    for step in range(params.max_new_tokens):
        tokens, logprobs = _sample_step(logits, params, stop.forbidden_ids, generator)
        tokens, finished = sampling.advance_finished(tokens, finished, stop_ids, stop.pad_id)
        step_tokens.append(tokens)
        step_logprobs.append(logprobs)
        if finished.all() or step + 1 == params.max_new_tokens:
            break
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(rows), 1)], dim=-1)
        logits = model(
            input_ids=tokens[:, None],
            attention_mask=attention_mask,
            position_ids=adapter.continuation_positions(next_positions + step, 1),  # [..., N, 1]
            cache=cache,
            use_cache=True,
        ).logits[:, -1]  # [N, V]
    return DecodedTokens(torch.stack(step_tokens, dim=1), torch.stack(step_logprobs, dim=1))


def _sample_step(
    logits: torch.Tensor, params: SamplingParams, forbidden_ids: Sequence[int], generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row of raw ``logits`` ``[N, V]``; return (tokens ``[N]``, their log-probs ``[N]``)."""
    processed = sampling.processed_logits(logits, params, forbidden_ids)
    tokens = sampling.draw_tokens(processed, greedy=params.greedy, generator=generator)
    reported = logits if params.logprobs_mode == "raw" else processed
    return tokens, sampling.token_logprobs(reported, tokens)
