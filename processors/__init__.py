"""Modality processors: turn a media reference into model-ready media under a budget.

Callers stay modality-agnostic through ``MODALITIES``::

    modality = MODALITIES.get("video")
    clip = modality.load(ref, modality.budget_type(fps=1.0))

Every loader raises a ``MediaError`` subclass naming the source for bad media, so the
data pipeline can skip and count such rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PIL import Image

from mmgrpo.registry import Registry
from processors.audio import AudioClip, load_audio
from processors.budgets import AudioBudget, ImageBudget, VideoBudget
from processors.errors import (
    CorruptMediaError, EmptyMediaError, MediaError, MediaShapeError, MissingMediaError, NonFiniteMediaError,
)
from processors.image import load_image
from processors.sizing import smart_resize
from processors.sources import VideoSpan
from processors.video import VideoClip, load_video

Budget = ImageBudget | VideoBudget | AudioBudget
LoadedMedia = Image.Image | VideoClip | AudioClip


@dataclass(frozen=True)
class Modality:
    """One kind of media: its budget type and its loader ``load(ref, budget) -> LoadedMedia``."""

    name: str
    budget_type: type[Budget]
    load: Callable[[Any, Any], LoadedMedia]


MODALITIES: Registry[Modality] = Registry("modality")
for _modality in (
    Modality("image", ImageBudget, load_image),
    Modality("video", VideoBudget, load_video),
    Modality("audio", AudioBudget, load_audio),
):
    MODALITIES.add(_modality.name, _modality)

__all__ = [
    "MODALITIES",
    "AudioBudget",
    "AudioClip",
    "Budget",
    "CorruptMediaError",
    "EmptyMediaError",
    "ImageBudget",
    "LoadedMedia",
    "MediaError",
    "MediaShapeError",
    "MissingMediaError",
    "NonFiniteMediaError",
    "Modality",
    "VideoBudget",
    "VideoClip",
    "VideoSpan",
    "load_audio",
    "load_image",
    "load_video",
    "smart_resize",
]
