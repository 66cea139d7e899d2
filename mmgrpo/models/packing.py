"""Padding-free forward passes: sequences packed into rows, no decoder work spent on padding.

A padded batch spends the decoder's work on every pad token; with long-tailed completion lengths
that is most of it (NeMo-RL measures 50-70%). Packed, whole sequences follow one another in a row,
first-fit by length into rows no wider than the widest sequence, so a packed forward never costs more
attention than the padded one and usually needs far fewer rows. Two forms:

- **Plain rows** (prompt + completion): the position ids restart at each sequence and transformers
  reads the boundaries from them (``find_packed_sequence_indices``): a block-diagonal causal mask
  under eager/SDPA. Families with multi-axis positions (M-RoPE) take a text-position row in front of
  their three axes (``[4, R, W]``), which is what marks the boundaries there. Flash attention finds
  them only in a single row, so under it everything goes into one row (variable-length kernels).
- **Continuations of a shared prompt** (group-shared encoding): a row holds completions of one prompt,
  behind that prompt's cached keys and values, with a 4-D mask letting each token see the prompt and
  its own completion's earlier tokens only. Needs attention that takes such a mask (eager, SDPA).

Log-probs and gradients equal the padded path's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

from mmgrpo.models.replay_cache import has_recurrent_layers
from mmgrpo.models.train_batch import TrainBatch

MASKED_ATTENTION = ("sdpa", "eager")  # implementations that take a ready 4-D mask, or build one from positions


def first_fit_bins(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into bins of at most ``capacity`` in total (a longer item gets a bin of its
    own): first-fit decreasing, bins in the order they were opened, each bin's indices ascending."""
    bins: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        target = next((b for b, free in enumerate(room) if lengths[index] <= free), None)
        if target is None:
            bins.append([])
            room.append(capacity)
            target = len(bins) - 1
        bins[target].append(index)
        room[target] -= lengths[index]
    return [sorted(members) for members in bins]


def check_packable(config: PretrainedConfig) -> None:
    """Raise for a decoder with recurrent layers (Qwen3.5's Gated DeltaNet linear attention): their state runs along
    a row, from one packed sequence into the next, whatever the positions or the mask say."""
    if has_recurrent_layers(config):
        raise ValueError(
            f"train.padding_free (sft.padding_free) does not support {config.model_type!r}: its linear-attention "
            "layers carry a state from one packed sequence into the next; set it to false"
        )


def text_attention(config: PretrainedConfig) -> str:
    """The decoder's attention implementation."""
    return config.get_text_config()._attn_implementation or "eager"


# ---- plain rows ------------------------------------------------------------------------------------------


def packed_hidden_states(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """Hidden states ``[B, Tc, D]`` of the states that predict each completion token (the token before it),
    from a packed forward of ``batch``'s rows; past a completion's end any state (masked later)."""
    adapter = batch.prompt.adapter
    backbone = adapter.backbone(model)
    check_packable(backbone.config)
    lengths = (batch.prompt.attention_mask.sum(1) + batch.completion_mask.sum(1)).tolist()
    attention = text_attention(backbone.config)
    if attention in MASKED_ATTENTION:
        capacity = batch.prompt_length + batch.completion_ids.shape[1]
    elif attention.startswith("flash"):
        capacity = sum(lengths)  # one row: flash attention reads sequence boundaries in a single row only
    else:
        raise ValueError(f"train.padding_free does not support attention {attention!r}: use sdpa, eager or flash")
    bins = first_fit_bins(lengths, capacity)
    order = [row for members in bins for row in members]
    ordered = batch if order == list(range(len(batch))) else batch.select(order)  # media follow their rows
    inputs, position_ids = ordered.forward_inputs(model)
    real = inputs.pop("attention_mask").bool()  # [B, T]
    fill = [sum(lengths[row] for row in members) for members in bins]
    width = max(fill)
    # Real tokens in row-major order are the bins' contents one after another: place bin j at row j.
    slots = torch.cat([j * width + torch.arange(n) for j, n in enumerate(fill)]).to(real.device)  # [L]
    for key, value in list(inputs.items()):
        if torch.is_tensor(value) and value.shape == real.shape:
            empty = batch.prompt.pad_token_id if key == "input_ids" else 0
            inputs[key] = _place(value[real], slots, len(bins) * width, empty).view(len(bins), width)
    inputs["position_ids"] = _packed_positions(position_ids, real, slots, len(bins), width)
    hidden = backbone(**inputs, use_cache=False).last_hidden_state.flatten(0, 1)  # [R * W, D]
    index = torch.zeros(real.shape, dtype=torch.long, device=real.device)  # [B, T]: each real token's slot
    index[real] = slots
    predicting = hidden[index[:, ordered.prompt_length - 1 : -1]]  # [B, Tc, D], rows in packing order
    return predicting[torch.as_tensor(order).argsort().to(predicting.device)]  # rows in batch order


def _place(values: torch.Tensor, slots: torch.Tensor, size: int, empty: int) -> torch.Tensor:
    """A flat ``[size]`` tensor with ``values`` at ``slots`` and ``empty`` elsewhere."""
    return values.new_full((size,), empty).index_copy(0, slots, values)


def _packed_positions(
    position_ids: torch.Tensor, real: torch.Tensor, slots: torch.Tensor, rows: int, width: int
) -> torch.Tensor:
    """Positions ``[R, W]`` (or ``[4, R, W]``: text positions, then the three axes) of the packed rows. A row's
    unused tail follows its real tokens (causal attention keeps it out of theirs): numbered by column. In
    ``position_ids``' dtype (Qwen3-Omni's are float: a video's time steps may fall between integers)."""
    tail = (torch.arange(rows * width, device=real.device) % width).to(position_ids.dtype)  # [R * W]
    if position_ids.dim() == 2:
        return tail.index_copy(0, slots, position_ids[real]).view(rows, width)
    text = tail.index_copy(0, slots, (real.long().cumsum(-1)[real] - 1).to(tail.dtype))  # [R * W]
    axes = tail.expand(3, -1).clone()
    axes[:, slots] = position_ids[:, real]
    return torch.cat([text[None], axes]).view(4, rows, width)


# ---- continuations of a shared prompt --------------------------------------------------------------------


@dataclass(frozen=True)
class PackedContinuations:
    """Completions continuing a batch of prompts (each without its last token, which predicts nothing), packed
    into rows ``[R, W]`` of one prompt's completions each, ``W`` the longest completion's length - 1."""

    input_ids: torch.Tensor  # [R, W]
    prompt_rows: torch.Tensor  # [R]: the prompt each row continues
    offsets: torch.Tensor  # [R, W]: each token's index inside its completion (0 at padding)
    attention_mask: torch.Tensor  # [R, 1, W, Tp + W] (True: attend): the prompt, and the own completion so far
    predicting: torch.Tensor  # [n, Tc - 1]: index into the flattened ``[R * W]`` states predicting tokens 1..


def pack_continuations(
    completion_ids: torch.Tensor, completion_mask: torch.Tensor, group_sizes: Sequence[int],
    prompt_mask: torch.Tensor, pad_token_id: int,
) -> PackedContinuations:
    """Pack ``completion_ids`` ``[n, Tc]`` (``group_sizes[p]`` of them continuing prompt p, whose mask is
    ``prompt_mask`` ``[P, Tp]``) into rows of one prompt's completions."""
    device = completion_ids.device
    width = max(completion_ids.shape[1] - 1, 1)
    lengths = (completion_mask.sum(1) - 1).clamp(min=0).tolist()  # tokens each completion feeds forward
    rows: list[tuple[int, list[int]]] = []  # (prompt, completions)
    start = 0
    for prompt, size in enumerate(group_sizes):
        group = range(start, start + size)
        rows += [(prompt, [group[i] for i in members]) for members in first_fit_bins([lengths[i] for i in group], width)]
        start += size
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long, device=device)
    offsets = torch.zeros_like(input_ids)
    segment = torch.full_like(input_ids, -1)  # [R, W]: the completion each token belongs to
    predicting = torch.zeros(completion_ids.shape[0], width, dtype=torch.long)
    for row, (_, members) in enumerate(rows):
        column = 0
        for index in members:
            span, length = slice(column, column + lengths[index]), lengths[index]
            input_ids[row, span] = completion_ids[index, :length]
            offsets[row, span] = torch.arange(length, device=device)
            segment[row, span] = index
            predicting[index, :length] = row * width + column + torch.arange(length)
            column += length
    prompt_rows = torch.tensor([prompt for prompt, _ in rows], dtype=torch.long, device=device)
    own = (segment[:, :, None] == segment[:, None, :]) & (segment[:, None, :] >= 0)  # [R, W, W]
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    prompt_keys = prompt_mask.bool()[prompt_rows, None, :].expand(-1, width, -1)  # [R, W, Tp]
    mask = torch.cat([prompt_keys, own & causal], -1)[:, None]  # [R, 1, W, Tp + W]
    return PackedContinuations(
        input_ids, prompt_rows, offsets, mask, predicting[:, : completion_ids.shape[1] - 1].to(device)
    )


def attention_mask_for(mask: torch.Tensor, config: PretrainedConfig) -> torch.Tensor:
    """``mask`` (True: attend) as the decoder's attention (of ``config``) takes a ready 4-D mask: boolean for SDPA,
    additive for eager. Kernels that take no arbitrary mask (flash attention) cannot run a shared prefix packed."""
    check_packable(config)
    attention = text_attention(config)
    if attention == "sdpa":
        return mask
    if attention == "eager":
        return torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, torch.finfo(torch.float32).min)
    raise ValueError(
        f"train.padding_free with group-shared encoding needs attention that takes a 4-D mask (sdpa or eager), "
        f"not {attention!r}: set model.attn_implementation=sdpa, or train.group_shared_encoding=false "
        "(packed rows without a shared prefix work with flash attention too)"
    )
