"""Group-shared prompt encoding: log-probs of G completions from one encoding of their prompt.

The G completions of a GRPO group share one prompt and one set of media. Instead of
running the vision tower and the prompt through the decoder G times, each prompt is
encoded once (``use_cache=True``), its KV cache is expanded to its group's rows, and
only the completion tokens go through the decoder, attending to the shared prompt
states. The expansion is an indexing op, so the backward pass sums the gradients of all
G completions into the shared prompt states and the vision tower. Log-probs and
gradients equal the plain path's (:func:`~mmgrpo.models.logprobs.sequence_logprobs`).

Under gradient checkpointing both passes checkpoint their decoder layers and keep the cache
(a :class:`~mmgrpo.models.replay_cache.ReplayCache`, whose updates the backward can replay):
the prompt's keys and values of every layer stay alive, with their graph, until the backward,
and each layer is recomputed once, the prompt's once per group. Recomputing the whole prompt
per group in the backward instead would save only those keys and values (with grouped-query
attention about 2 * kv_heads * head_dim / hidden_size of a layer input, which checkpointing
keeps anyway) for a second prompt and vision forward.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from mmgrpo.models.batch import PromptBatch, TokenIds
from mmgrpo.models.train_batch import attach_completions, pad_completions
from mmgrpo.models.compat import cache_argument, checkpointed_layers_keep_cache
from mmgrpo.models.inline_media import completion_positions, inline_inputs, placeholder_counts
from mmgrpo.models.logprobs import (
    LogProbs, Lockstep, TokenStatistic, agreed, head_calls_for, sequence_logprobs, token_logprobs,
)
from mmgrpo.models.media_check import check_media_tokens
from mmgrpo.models.packing import attention_mask_for, pack_continuations
from mmgrpo.models.replay_cache import ReplayCache
from mmgrpo.types import InlineMedia


def completion_logprobs(
    model: torch.nn.Module,
    prompts: PromptBatch,
    completions: Sequence[TokenIds],
    group_sizes: Sequence[int],
    *,
    group_shared_encoding: bool = True,
    micro_batch_size: int,
    statistic: TokenStatistic | None = None,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    media: Sequence[InlineMedia | None] | None = None,
    padding_free: bool = False,
    lockstep: Lockstep | None = None,
) -> LogProbs:
    """Log-probs ``[N, Tc]`` of ``completions`` (group after group, ``group_sizes[p]`` for prompt p), ``media[i]``
    the media inside completion i (a tool's images; None: none has any); ``lockstep``: where each forward is a
    collective of the ranks, how it agrees with theirs (:data:`~mmgrpo.models.logprobs.Lockstep`).

    ``group_shared_encoding`` picks :func:`grouped_logprobs`; off, every completion is
    a full prompt + completion row (:func:`~mmgrpo.models.logprobs.sequence_logprobs`). So is it, on every rank in
    ``lockstep``, where some rank's completions hold media: the media tower then runs inside each rank's full forward
    alike. (Group-shared, the tower ran in one rank's continuation and on a dummy in another's, and the ranks'
    gradient reductions came out of order under FSDP2: measured.)
    ``padding_free`` packs rows without padding (:mod:`mmgrpo.models.packing`).
    """
    options = dict(
        micro_batch_size=micro_batch_size, statistic=statistic, chunk_size=chunk_size, temperature=temperature,
        padding_free=padding_free, lockstep=lockstep,
    )
    if group_shared_encoding and not (lockstep is not None and _media_on_some_rank(lockstep, media)):
        return grouped_logprobs(model, prompts, completions, group_sizes, media=media, **options)
    _check_groups(prompts, completions, group_sizes)
    batch = attach_completions(prompts, completions, [prompts.kept[row] for row in _group_rows(group_sizes)], media)
    return sequence_logprobs(model, batch, **options)


def _media_on_some_rank(lockstep: Lockstep, media: Sequence[InlineMedia | None] | None) -> bool:
    here = media is not None and any(m is not None for m in media)
    return bool(lockstep({"media_inside": float(here)})["media_inside"])


def grouped_logprobs(
    model: torch.nn.Module,
    prompts: PromptBatch,
    completions: Sequence[TokenIds],
    group_sizes: Sequence[int],
    *,
    micro_batch_size: int,
    statistic: TokenStatistic | None = None,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    media: Sequence[InlineMedia | None] | None = None,
    padding_free: bool = False,
    lockstep: Lockstep | None = None,
) -> LogProbs:
    """Log-probs ``[N, Tc]`` (and ``statistic``) of ``completions``, each prompt encoded once.

    ``completions`` are token-id lists laid out group after group, ``group_sizes[p]``
    of them continuing prompt row p (sizes may differ: dynamic group size). Each
    forward covers whole groups, about ``micro_batch_size`` completions (at least one group).
    """
    _check_groups(prompts, completions, group_sizes)
    completion_ids, completion_mask = pad_completions(
        completions, pad_token_id=prompts.pad_token_id, device=prompts.input_ids.device
    )  # [N, Tc]
    sample_ids = [prompts.sample_ids[row] for row in _group_rows(group_sizes)]
    check_media_tokens(completion_ids, placeholder_counts(media, len(completions)), prompts.placeholder_ids, sample_ids)
    parts = []
    for prompt_rows, completion_rows in group_chunks(group_sizes, micro_batch_size):
        parts.append(
            _shared_forward(
                model,
                prompts if len(prompt_rows) == len(prompts) else prompts.select(prompt_rows),
                completion_ids[completion_rows],
                completion_mask[completion_rows],
                [group_sizes[p] for p in prompt_rows],
                None if media is None else media[completion_rows],
                statistic=statistic,
                chunk_size=chunk_size,
                temperature=temperature,
                padding_free=padding_free,
                lockstep=lockstep,
            )
        )
    logp = torch.cat([part[0] for part in parts])  # [N, Tc]
    stat = torch.cat([part[1] for part in parts]) if statistic else None  # [N, Tc]
    return logp, stat


def _shared_forward(
    model: torch.nn.Module,
    prompts: PromptBatch,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    group_sizes: Sequence[int],
    media: Sequence[InlineMedia | None] | None,
    *,
    statistic: TokenStatistic | None,
    chunk_size: int,
    temperature: float,
    padding_free: bool,
    lockstep: Lockstep | None,
) -> LogProbs:
    """One forward of P prompts (once each) and their n completions ``[n, Tc]`` (``media``: inside them);
    ``padding_free``: each prompt's completions packed into rows of their own (padded if any holds media)."""
    adapter = prompts.adapter
    backbone = adapter.backbone(model)
    inputs = prompts.model_inputs()
    prompt_positions, next_position = adapter.prompt_positions(model, inputs)
    device = prompts.input_ids.device
    expand = torch.repeat_interleave(
        torch.arange(len(prompts), device=device), torch.as_tensor(list(group_sizes), device=device)
    )  # [n]: the prompt row of each completion
    cache = ReplayCache(config=backbone.config)
    own_width = completion_ids.shape[1]
    agreement = agreed(lockstep, head_calls=head_calls_for(completion_mask, chunk_size), continued=float(own_width > 1))
    if agreement["continued"] and own_width == 1:  # another rank's forward continues: so does this one, on a pad
        completion_ids = torch.nn.functional.pad(completion_ids, (0, 1), value=prompts.pad_token_id)  # [n, 2]
        completion_mask = torch.nn.functional.pad(completion_mask, (0, 1))  # the pad predicts nothing counted
    # use_cache=False: the cache passed in is filled all the same, and transformers does not warn
    # that it turns caching off under checkpointing.
    with checkpointed_layers_keep_cache(backbone):
        encoded = backbone(**inputs, position_ids=prompt_positions, **cache_argument(cache), use_cache=False)
        _check_cache_length(cache, prompts.input_ids.shape[1])
        # The prompt's last state predicts the first completion token; the completion's own
        # states (all but the last token's) predict the rest.
        predicting = encoded.last_hidden_state[expand, -1:]  # [n, 1, D]
        width = completion_ids.shape[1]
        inline = media is not None and any(m is not None for m in media)
        if width > 1 and padding_free and not inline:
            packed = pack_continuations(
                completion_ids, completion_mask, group_sizes, prompts.attention_mask, prompts.pad_token_id
            )
            cache = cache.continued(packed.prompt_rows)  # a row per packed bin of one group's completions
            continued = backbone(
                input_ids=packed.input_ids,
                attention_mask=attention_mask_for(packed.attention_mask, backbone.config),
                position_ids=adapter.continuation_positions(next_position[packed.prompt_rows], 1) + packed.offsets,
                **cache_argument(cache),
                use_cache=False,
            ).last_hidden_state  # [R, W, D]
            _check_cache_length(cache, prompts.input_ids.shape[1] + packed.input_ids.shape[1])
            states = continued.flatten(0, 1)[packed.predicting]  # [n, Tc - 1, D]
            predicting = torch.cat([predicting, states], 1)  # [n, Tc, D]
        elif width > 1:
            cache = cache.continued(expand)  # indexing: the backward sums the group's gradients
            continued = backbone(
                input_ids=completion_ids[:, :-1],
                attention_mask=torch.cat([prompts.attention_mask[expand], completion_mask[:, :-1]], 1),
                position_ids=(
                    completion_positions(model, prompts.select(expand.tolist()), completion_ids[:, :-1],
                                         completion_mask[:, :-1], media)
                    if inline else adapter.continuation_positions(next_position[expand], width - 1)
                ),
                **(inline_inputs(adapter, media, device) if inline else {}),
                **cache_argument(cache),
                use_cache=False,
            )
            _check_cache_length(cache, prompts.input_ids.shape[1] + width - 1)
            predicting = torch.cat([predicting, continued.last_hidden_state], 1)  # [n, Tc, D]
    logp, stat = token_logprobs(
        adapter.output_head(model),
        predicting,
        completion_ids,
        completion_mask,
        statistic=statistic,
        chunk_size=chunk_size,
        temperature=temperature,
        head_calls=int(agreement["head_calls"]),
    )
    return logp[:, :own_width], None if stat is None else stat[:, :own_width]


def _check_cache_length(cache: ReplayCache, expected_length: int) -> None:
    """Guard against a transformers version or model silently leaving the passed ``cache`` out."""
    length = cache.get_seq_length()
    if length != expected_length:
        raise RuntimeError(
            f"the forward did not fill the KV cache passed to it ({length} cached tokens, expected "
            f"{expected_length}): this transformers version or model is not supported by group-shared encoding"
        )


def _check_groups(prompts: PromptBatch, completions: Sequence[TokenIds], group_sizes: Sequence[int]) -> None:
    if len(group_sizes) != len(prompts):
        raise ValueError(f"{len(group_sizes)} group sizes for {len(prompts)} prompts")
    if any(size < 1 for size in group_sizes):
        raise ValueError(f"every group needs at least one completion, got sizes {list(group_sizes)}")
    if sum(group_sizes) != len(completions):
        raise ValueError(f"group sizes sum to {sum(group_sizes)} but there are {len(completions)} completions")


def _group_rows(group_sizes: Sequence[int]) -> list[int]:
    """The prompt row of each completion: ``[0] * G0 + [1] * G1 + ...``."""
    return [row for row, size in enumerate(group_sizes) for _ in range(size)]


def group_chunks(group_sizes: Sequence[int], micro_batch_size: int) -> Iterator[tuple[list[int], slice]]:
    """(prompt rows, completion slice) of consecutive whole groups, ~``micro_batch_size`` completions each."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    rows: list[int] = []
    start = end = 0
    for row, size in enumerate(group_sizes):
        if rows and end - start + size > micro_batch_size:
            yield rows, slice(start, end)
            rows, start = [], end
        rows.append(row)
        end += size
    if rows:
        yield rows, slice(start, end)
