"""Media inside completions: the images a tool returned mid-trajectory, where the policy saw them.

A multi-turn rollout (:mod:`mmgrpo.rollout.tool_turns`) appends a tool turn to the trajectory with its images
expanded to placeholder tokens, as the processor expands a prompt's; the images' tensors ride in
:attr:`~mmgrpo.types.Completion.media`. The sampler's next turn and the trainer both read one row: the prompt,
then the trajectory, with the prompt's media followed by the trajectory's (the order of their placeholders), so
positions (M-RoPE's included) and features are what one forward over the whole conversation gives.

Only families whose adapter says ``inline_media`` (every media input per item or per patch, items concatenated
in token order) take them; for the others a tool's images are dropped and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch
from PIL import Image
from transformers import ProcessorMixin

from mmgrpo.models.adapters import FamilyAdapter, PositionIds, adapter_for
from mmgrpo.models.batch import PROCESSOR_MEDIA_ARGS, EncodedRow, MediaBudgets, PromptBatch, batch_from_rows
from mmgrpo.models.media_check import check_media_tokens
from mmgrpo.types import InlineMedia
from processors import MODALITIES


def joined(adapter: FamilyAdapter, first: InlineMedia | None, second: InlineMedia, offset: int) -> InlineMedia:
    """A completion's media ``first`` followed by ``second``, whose per-token extras start at its token ``offset``."""
    token_inputs = {
        key: torch.cat([_fitted(None if first is None else first.token_inputs.get(key), offset, value.dtype), value])
        for key, value in second.token_inputs.items()
    }
    if first is None:
        return replace(second, token_inputs=token_inputs)
    return InlineMedia(
        inputs=adapter.concat_media([first.inputs, second.inputs]),
        counts=_summed(first.counts, second.counts),
        placeholder_tokens=_summed(first.placeholder_tokens, second.placeholder_tokens),
        token_inputs=token_inputs,
        images=(*first.images, *second.images),
    )


def extended_row(adapter: FamilyAdapter, row: EncodedRow, token_ids: Sequence[int], media: InlineMedia | None,
                 *, pixels: bool = True) -> EncodedRow:
    """The prompt ``row`` followed by a completion's ``token_ids`` and its ``media`` (the items after the
    prompt's); ``pixels=False`` leaves out per-patch inputs (enough for positions, no pixel copies)."""
    tail = torch.tensor(list(token_ids), dtype=row.input_ids.dtype)
    keys = set(row.token_inputs) | set(media.token_inputs if media else ())
    token_inputs = {}
    for key in keys:
        prompt_part = row.token_inputs.get(key)
        inline = None if media is None else media.token_inputs.get(key)
        dtype = (prompt_part if prompt_part is not None else inline).dtype
        token_inputs[key] = torch.cat([_fitted(prompt_part, len(row.input_ids), dtype), _fitted(inline, len(tail), dtype)])
    media_inputs = row.media_inputs if media is None else adapter.concat_media([row.media_inputs, media.inputs])
    if not pixels:
        media_inputs = {key: value for key, value in media_inputs.items() if key not in adapter.per_patch_keys}
    return EncodedRow(
        input_ids=torch.cat([row.input_ids, tail]),
        token_inputs=token_inputs,
        media_inputs=media_inputs,
        media_counts=row.media_counts if media is None else _summed(row.media_counts, media.counts),
    )


def completion_positions(model: torch.nn.Module, prompts: PromptBatch, completion_ids: torch.Tensor,
                         completion_mask: torch.Tensor, media: Sequence[InlineMedia | None]) -> PositionIds:
    """Position ids ``[..., n, L]`` of right-padded completions ``[n, L]``, completion i continuing prompt row i
    with ``media[i]`` inside it, numbered over the whole row as the sampler's next turns numbered them."""
    adapter = prompts.adapter
    lengths = completion_mask.sum(-1).tolist()  # [n]
    rows = [
        extended_row(adapter, row, completion_ids[i, : lengths[i]].tolist(), media[i], pixels=False)
        for i, row in enumerate(prompts.to("cpu").rows())
    ]
    whole = batch_from_rows(
        rows, family=prompts.family, sample_ids=prompts.sample_ids, kept=list(range(len(rows))), dropped=[],
        placeholder_ids=prompts.placeholder_ids, pad_token_id=prompts.pad_token_id,
    ).to(completion_ids.device)
    positions, _ = adapter.prompt_positions(model, whole.model_inputs())  # [..., n, W], real tokens at the right
    width, columns = completion_ids.shape[1], positions.shape[-1]
    lengths_tensor = torch.as_tensor(lengths, device=positions.device)[:, None]  # [n, 1]
    # completion token j of row i sits at column W - L_i + j; padding past it repeats the last position (masked)
    index = (columns - lengths_tensor + torch.arange(width, device=positions.device)).clamp(max=columns - 1)
    return positions.gather(-1, index.expand(*positions.shape[:-1], width))


def inline_inputs(adapter: FamilyAdapter, media: Sequence[InlineMedia | None], device: torch.device) -> dict:
    """The forward's media inputs of the items inside completions ``media`` (in row order), on ``device``."""
    present = [m.inputs for m in media if m is not None]
    if not present:
        return {}
    return {key: value.to(device) for key, value in adapter.forward_media(adapter.concat_media(present)).items()}


def placeholder_counts(media: Sequence[InlineMedia | None] | None, rows: int) -> list[dict[str, int]]:
    """The placeholder tokens each of ``rows`` completions holds (what the media-token check expects)."""
    if media is None:
        return [{} for _ in range(rows)]
    return [{} if m is None else dict(m.placeholder_tokens) for m in media]


def _fitted(values: torch.Tensor | None, length: int, dtype: torch.dtype) -> torch.Tensor:
    """``values`` cut or zero-padded to ``length`` (all zeros when None)."""
    out = torch.zeros(length, dtype=dtype)
    if values is not None:
        out[: min(length, len(values))] = values[:length]
    return out


def _summed(first: dict[str, int], second: dict[str, int]) -> dict[str, int]:
    return {key: first.get(key, 0) + second.get(key, 0) for key in {*first, *second}}


def encode_inline(processor: ProcessorMixin, family: str, text: str, images: Sequence[Image.Image],
                  budgets: MediaBudgets) -> tuple[list[int], InlineMedia]:
    """``text``, holding one image placeholder per image of ``images``, encoded with them under the prompt's image
    budget: its token ids (placeholders expanded) and the images as media whose token extras cover those ids.
    Raises :class:`~processors.MediaError` for an image the budget refuses."""
    adapter = adapter_for(family)
    modality = MODALITIES.get("image")
    loaded = [modality.load(image, budgets.get("image") or modality.budget_type()) for image in images]
    encoded = dict(processor(text=[text], return_tensors="pt", **PROCESSOR_MEDIA_ARGS.get("image")([loaded])))
    counts = {"image": len(loaded)}
    expected = adapter.expected_media_tokens(processor, encoded, [counts])
    check_media_tokens(encoded["input_ids"], expected, adapter.placeholder_token_ids(processor), ["a tool's images"])
    input_ids, _ = encoded.pop("input_ids")[0], encoded.pop("attention_mask")
    return input_ids.tolist(), InlineMedia(
        inputs={key: value for key, value in encoded.items() if key not in adapter.per_token_keys},
        counts=counts,
        placeholder_tokens={modality: tokens for modality, tokens in expected[0].items() if tokens},
        token_inputs={key: value[0] for key, value in encoded.items() if key in adapter.per_token_keys},
        images=tuple(torch.from_numpy(np.array(image.convert("RGB"))) for image in loaded),
    )
