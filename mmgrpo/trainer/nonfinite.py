"""A loss or gradient that became NaN or infinite: stop before the update, and name the rows.

SFT checks the loss of each micro-batch and GRPO the loss of each mini-batch (summed over the
ranks, so that every rank stops at the same point); the single-process and FSDP2 back ends check
the gradient norm before the optimizer steps (a DeepSpeed engine steps first: it is checked after).
The error names the rows of the micro-batch whose loss was not finite (or, for a gradient, of the
optimizer step) with their media, the run saves its last finished step as after any error, and
the command prints one line and exits 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mmgrpo.failures import RunFailure
from mmgrpo.types import Sample
from processors import MODALITIES
from processors.sources import describe

ROWS_NAMED = 8  # rows the one-line message names; the run report lists them all


class NonFiniteTrainingError(RunFailure, FloatingPointError):
    """``quantity`` ("loss", "gradient norm") became ``value`` (NaN or infinite) on the rows ``row_ids``.

    ``stage``, ``step`` and each row's ``media`` are filled in by :func:`naming_rows` on the way out."""

    def __init__(self, quantity: str, value: float, row_ids: Sequence[str] = ()) -> None:
        super().__init__(quantity, value)
        self.quantity, self.value, self.row_ids = quantity, value, list(row_ids)
        self.stage: str | None = None
        self.step: int | None = None
        self.media: dict[str, list[str]] = {}

    def record(self) -> dict[str, Any]:
        return super().record() | {
            "stage": self.stage, "step": self.step, "quantity": self.quantity, "value": str(self.value),
            "rows": self.rows(),
        }

    def rows(self) -> list[dict[str, Any]]:
        """Every row named, with its media sources (for the run report)."""
        return [{"id": row_id, "media": self.media.get(row_id, [])} for row_id in self.row_ids]

    def __str__(self) -> str:
        where = f"{self.stage} step {self.step}: " if self.stage else ""
        named = [_row_text(row["id"], row["media"]) for row in self.rows()[:ROWS_NAMED]]
        more = len(self.row_ids) - len(named)
        rows = "; ".join(named) + (f"; and {more} more" if more > 0 else "")
        return f"{where}the {self.quantity} became {self.value} on the rows {rows or '(unknown)'}"


def require_finite(quantity: str, value: float, row_ids: Sequence[str] = ()) -> float:
    """``value``, or :class:`NonFiniteTrainingError` when it is NaN or infinite."""
    if not math.isfinite(value):
        raise NonFiniteTrainingError(quantity, value, row_ids)
    return value


@contextmanager
def blamed_on(row_ids: Sequence[str]) -> Iterator[None]:
    """A :class:`NonFiniteTrainingError` raised in the block without rows (a back end's gradient
    check) is about ``row_ids``."""
    try:
        yield
    except NonFiniteTrainingError as error:
        error.row_ids = error.row_ids or list(row_ids)
        raise


@contextmanager
def naming_rows(samples: Sequence[Sample], *, stage: str, step: int) -> Iterator[None]:
    """A :class:`NonFiniteTrainingError` raised in the block learns the stage, the step and the media
    of its rows (found among ``samples``)."""
    try:
        yield
    except NonFiniteTrainingError as error:
        error.stage, error.step = stage, step
        by_id = {sample.id: sample for sample in samples}
        error.media = {row_id: media_sources(by_id[row_id]) for row_id in error.row_ids if row_id in by_id}
        raise


def media_sources(sample: Sample) -> list[str]:
    """The media files (or in-memory descriptions) of ``sample``, in modality order."""
    return [describe(ref) for name in MODALITIES for ref in sample.media(name)]


def _row_text(row_id: str, media: list[str]) -> str:
    return f"{row_id} ({', '.join(media)})" if media else str(row_id)
