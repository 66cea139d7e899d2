"""Group-shared decoding: prefill each prompt (and its media) once, branch G continuations.

One forward encodes the P left-padded prompts, vision towers included, into a KV
cache. The cache rows are then repeated, prompt i ``group_sizes[i]`` times, and an
incremental loop decodes all N = sum(group_sizes) completions together, one token per
row per step, with positions continued by the family's adapter
(:mod:`mmgrpo.models.adapters`). Rows that emit a stop token leave the batch (and the
cache), so late steps only pay for completions still running.
Versus ``model.generate(num_return_sequences=G)``, the prompt and media are encoded P
instead of N times.

Under a back end whose forward passes are collective (ZeRO-3, FSDP2: each module gathers
its weights from every rank), ``all_ranks_done`` makes a rank whose completions have all
stopped keep running (discarded) forward passes until every rank's have.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from mmgrpo.models.adapters import FamilyAdapter
from mmgrpo.models.compat import cache_argument
from mmgrpo.rollout import sampling
from mmgrpo.rollout.base import SamplingParams


@dataclass(frozen=True)
class TokenRules:
    """Which ids a completion may never contain, which end it, and what fills it after the end."""

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
    logprobs: torch.Tensor  # [N, T], float32; not meaningful after the stop token


@torch.no_grad()
def decode_shared_prompts(
    model: torch.nn.Module,
    prompt_inputs: Mapping[str, torch.Tensor],
    group_sizes: Sequence[int],
    params: SamplingParams,
    *,
    rules: TokenRules,
    adapter: FamilyAdapter,
    generator: torch.Generator | None = None,
    all_ranks_done: Callable[[bool], bool] = bool,
) -> DecodedTokens:
    """Sample ``group_sizes[i]`` completions of prompt i, the rows of prompt i adjacent.

    ``prompt_inputs`` is one left-padded batch of P prompts (``input_ids``,
    ``attention_mask``, media tensors) as the model's forward takes it.
    ``all_ranks_done(done_here)`` says whether every rank is done (default: this one alone).
    """
    cache = DynamicCache(config=model.config)
    logits, attention_mask, next_positions = _prefill_groups(
        model, prompt_inputs, group_sizes, cache, adapter
    )
    num_rows, device = len(attention_mask), attention_mask.device
    token_ids = torch.full((num_rows, params.max_new_tokens), rules.pad_id, device=device)  # [N, T]
    logprobs = torch.zeros(token_ids.shape, device=device)  # [N, T]
    prompt_width = attention_mask.shape[1]
    # the prompt mask then ones for every token still to come: each step passes a wider slice
    attention_mask = torch.cat([attention_mask, attention_mask.new_ones(num_rows, params.max_new_tokens)], dim=-1)
    active = torch.arange(num_rows, device=device)  # [A]: completion rows still decoding
    every_row_active = True  # then rows are written by slicing, not by index
    stop_ids = rules.stop_ids.to(device)
    forbidden_ids = torch.tensor(rules.forbidden_ids, dtype=torch.long, device=device)
    length = 0  # decoded steps here; after it, forward passes only keep other ranks company
    for step in range(params.max_new_tokens):
        done_here = length < step  # every row stopped at an earlier step
        if not done_here:
            tokens, token_logprobs = _sample_step(logits, params, forbidden_ids, generator)  # [A], [A]
            rows = slice(None) if every_row_active else active
            token_ids[rows, step] = tokens
            logprobs[rows, step] = token_logprobs
            length = step + 1
            running = ~torch.isin(tokens, stop_ids)  # [A]
            done_here = not running.any()
        if step + 1 == params.max_new_tokens or all_ranks_done(done_here):
            break
        if not done_here and not running.all():  # drop finished rows so later steps only compute live ones
            keep = running.nonzero().squeeze(-1)  # [A']
            cache.reorder_cache(keep)
            active, tokens = active[keep], tokens[keep]
            attention_mask, next_positions = attention_mask[keep], next_positions[keep]
            every_row_active = False
        logits = model(
            input_ids=tokens[:, None],
            attention_mask=attention_mask[:, : prompt_width + step + 1],
            position_ids=adapter.continuation_positions(next_positions + step, 1),  # [..., A, 1]
            **cache_argument(cache),
            use_cache=True,
        ).logits[:, -1]  # [A, V]
    return DecodedTokens(token_ids[:, :length], logprobs[:, :length])


def _prefill_groups(
    model: torch.nn.Module,
    prompt_inputs: Mapping[str, torch.Tensor],
    group_sizes: Sequence[int],
    cache: DynamicCache,
    adapter: FamilyAdapter,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Encode the P prompts once into ``cache``, then repeat prompt i's cache row ``group_sizes[i]`` times.

    Returns, per completion row: next-token logits ``[N, V]``, prompt attention mask
    ``[N, L]`` and the position the first generated token takes ``[N]``.
    """
    attention_mask = prompt_inputs["attention_mask"]  # [P, L]
    prefill_positions, next_positions = adapter.prompt_positions(model, prompt_inputs)  # [..., P, L], [P]
    prefill = model(
        **prompt_inputs, position_ids=prefill_positions, **cache_argument(cache), use_cache=True, logits_to_keep=1
    )
    rows = torch.repeat_interleave(
        torch.arange(len(group_sizes), device=attention_mask.device),
        torch.tensor(group_sizes, device=attention_mask.device),
    )  # [N]: prompt index of each completion row
    cache.reorder_cache(rows)
    return prefill.logits[:, -1][rows], attention_mask[rows], next_positions[rows]


def _sample_step(
    logits: torch.Tensor,
    params: SamplingParams,
    forbidden_ids: torch.Tensor,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row of raw ``logits`` ``[N, V]``; return tokens ``[N]`` and their log-probs ``[N]``."""
    processed = sampling.processed_logits(logits, params, forbidden_ids)
    tokens = sampling.draw_tokens(processed, greedy=params.greedy, generator=generator)
    reported = logits if params.logprobs_mode == "raw" else processed
    return tokens, sampling.token_logprobs(reported, tokens)
