"""How a batch's media items line up with its rows: item and patch indices of rows, placeholder tokens per row.

Processors concatenate the items (images, videos, clips) of all rows in row order; these helpers find the
items, and the patch rows of items, that belong to given rows, and sum per-item token counts by row.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import torch

MediaCounts = Mapping[str, int]  # modality -> media items in one row


def item_index(media_counts: Sequence[MediaCounts], modality: str, rows: Sequence[int]) -> torch.Tensor:
    """Indices of the ``modality`` items of ``rows``, items numbered in row order."""
    counts = [row.get(modality, 0) for row in media_counts]
    starts = [0, *itertools.accumulate(counts)]
    index = [item for row in rows for item in range(starts[row], starts[row] + counts[row])]
    return torch.tensor(index, dtype=torch.long)


def patch_index(grids: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """Row indices of ``items``'s patches when item i owns ``prod(grids[i])`` consecutive rows."""
    sizes = grids.prod(-1)  # [items]
    starts = torch.cumsum(sizes, 0) - sizes  # [items]
    spans = [torch.arange(int(starts[i]), int(starts[i] + sizes[i])) for i in items.tolist()]
    return torch.cat(spans) if spans else torch.zeros(0, dtype=torch.long)


def tokens_per_row(item_tokens: torch.Tensor, media_counts: Sequence[MediaCounts], modality: str) -> list[int]:
    """``item_tokens`` ``[items]`` summed over each row's ``modality`` items."""
    return [int(item_tokens[item_index(media_counts, modality, [row])].sum()) for row in range(len(media_counts))]


def whisper_clip_tokens(frames: torch.Tensor) -> torch.Tensor:
    """A clip of F feature frames needs one token per 4 frames (a stride-2 convolution, then stride-2 pooling), as
    in Qwen2-Audio and Qwen2.5-Omni."""
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


def audio_tokens_per_row(
    encoded: Mapping[str, torch.Tensor],
    media_counts: Sequence[MediaCounts],
    clip_tokens: Callable[[torch.Tensor], torch.Tensor] = whisper_clip_tokens,
) -> list[int]:
    """Audio tokens of each row: ``clip_tokens`` ``[clips]`` of each clip's feature frames ``[clips]``."""
    if "feature_attention_mask" not in encoded:
        return [0 for _ in media_counts]
    frames = encoded["feature_attention_mask"].sum(-1)  # [clips]
    return tokens_per_row(clip_tokens(frames), media_counts, "audio")


def chunked_clip_tokens(frames: torch.Tensor, chunk: int, halvings: int) -> torch.Tensor:
    """A clip cut into chunks of ``chunk`` frames, each halved ``halvings`` times by stride-2 convolutions (Qwen3-Omni:
    chunks of 100 frames, 3 halvings: 13 tokens a second)."""

    def halved(length: torch.Tensor) -> torch.Tensor:
        for _ in range(halvings):
            length = (length - 1) // 2 + 1
        return length

    return (frames // chunk) * halved(torch.tensor(chunk)) + halved(frames % chunk)
