"""A multi-turn completion turn by turn, as ``completions.jsonl`` and the report's gallery show it: the policy's
turns and the tools' (their text, and the images they returned as small inlined JPEGs)."""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image

from mmgrpo.pagekit.thumbnails import THUMBNAIL_SIDE, jpeg_data_uri
from mmgrpo.types import Completion

MODALITY_TYPES = "mm_token_type_ids"  # per-token extras marking media tokens (nonzero): where a tool's images sit


def turn_records(completion: Completion, tokenizer: Any) -> list[dict[str, Any]]:
    """``[{"role": "assistant" | "tool", "text": ..., "images": [data URI, ...]}, ...]`` of a completion with tool
    turns, in order; [] for a single-turn one. Text is decoded without special tokens."""
    if not completion.observation_spans:
        return []
    ids, records, start = completion.token_ids, [], 0
    images = list(completion.media.images) if completion.media is not None else []
    types = completion.media.token_inputs.get(MODALITY_TYPES) if completion.media is not None else None
    for index, (first, end) in enumerate(completion.observation_spans):
        records.append(_turn("assistant", ids[start:first], tokenizer))
        last = index == len(completion.observation_spans) - 1
        shown = len(images) if last or types is None else _media_runs(types[first:end])
        records.append(_turn("tool", ids[first:end], tokenizer, images[:shown]))
        images, start = images[shown:], end
    if start < len(ids):
        records.append(_turn("assistant", ids[start:], tokenizer))
    return records


def _turn(role: str, ids: list[int], tokenizer: Any, images: list[torch.Tensor] = ()) -> dict[str, Any]:
    text = tokenizer.decode(ids, skip_special_tokens=True).strip()
    return {"role": role, "text": text,
            "images": [jpeg_data_uri(Image.fromarray(image.numpy()), THUMBNAIL_SIDE) for image in images]}


def _media_runs(types: torch.Tensor) -> int:
    """How many media items a span holds: its runs of nonzero modality types."""
    marked = (types != 0).long()
    return int(marked[0]) + int((marked[1:] > marked[:-1]).sum()) if len(marked) else 0
