"""Placeholder-token consistency: every row's media placeholders must match its features.

Without this check a mismatch surfaces mid-step as transformers' "Image features and
image tokens do not match", naming neither the row nor the cause. Typical causes are a
prompt truncated through its media tokens, a bad dataset row, or a completion that
sampled a placeholder token such as ``<|image_pad|>``. The batch builder skips (and
records) a row that fails :func:`check_prompt_placeholders`, a bad row; a failure of
:func:`check_media_tokens` after encoding still raises. :func:`nonfinite_inputs` finds processor
outputs holding NaN or infinity (media whose values are finite but absurd, e.g. audio at 1e30),
whose rows the batch builder leaves out as bad rows too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch


class MediaTokenMismatchError(ValueError):
    """A row's placeholder count differs from what its media need."""

    def __init__(self, sample_id: str, modality: str, found: int, expected: int, what: str) -> None:
        self.sample_id = sample_id
        self.modality = modality
        self.found = found
        self.expected = expected
        super().__init__(f"sample {sample_id!r}: {found} {modality} placeholder tokens but {what} {expected}")


def check_prompt_placeholders(
    texts: Sequence[str],
    media_counts: Sequence[Mapping[str, int]],
    placeholders: Mapping[str, str],
    sample_ids: Sequence[str],
) -> None:
    """Before encoding: each rendered prompt must hold one placeholder per media item.

    ``placeholders`` maps a modality to its placeholder string (e.g. ``<|image_pad|>``);
    a row whose text mentions media it does not carry (or the reverse) is a bad row.
    """
    for modality, placeholder in placeholders.items():
        for sample_id, text, counts in zip(sample_ids, texts, media_counts):
            found, needed = text.count(placeholder), counts.get(modality, 0)
            if found != needed:
                raise MediaTokenMismatchError(sample_id, modality, found, needed, f"{modality} inputs in the row:")


def check_media_tokens(
    input_ids: torch.Tensor,
    expected: Sequence[Mapping[str, int]],
    placeholder_ids: Mapping[str, int],
    sample_ids: Sequence[str],
) -> None:
    """Raise :class:`MediaTokenMismatchError` for the first row whose placeholders do not match.

    ``input_ids`` ``[B, T]`` (padding never holds placeholder ids); ``expected[b]`` maps
    a modality to the placeholder tokens row ``b`` needs (a missing modality needs 0);
    ``placeholder_ids`` maps a modality to its token id.
    """
    what = (
        "its features need (prompt truncated through media, a bad row, or placeholder tokens sampled "
        "in the completion: forbid them during generation):"
    )
    for modality, token_id in placeholder_ids.items():
        found = (input_ids == token_id).sum(-1).tolist()  # [B]
        for sample_id, row_found, row_expected in zip(sample_ids, found, expected):
            needed = row_expected.get(modality, 0)
            if row_found != needed:
                raise MediaTokenMismatchError(sample_id, modality, row_found, needed, what)


def nonfinite_inputs(encoded: Mapping[str, Any]) -> list[str]:
    """The keys of the processor outputs ``encoded`` whose floating-point tensors hold NaN or
    infinity (pixel values, audio features, ...): one vectorised pass over what was encoded anyway."""
    return [
        key for key, value in encoded.items()
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not _all_finite(value)
    ]


def _all_finite(values: torch.Tensor) -> bool:
    """A finite sum proves every value finite (NaN or infinity would make it non-finite): one reduction
    without a temporary tensor (a tenth of ``isfinite(...).all()`` on a CPU); the element check only
    when the sum is not finite, which also catches finite values whose sum overflowed."""
    return bool(values.sum().isfinite()) or bool(torch.isfinite(values).all())
