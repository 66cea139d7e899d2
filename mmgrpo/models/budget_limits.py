"""Refuse media budgets that a checkpoint's processor would silently override or reject.

mmgrpo resizes and resamples media under the config's budgets (``model.min_pixels``,
``model.max_pixels``, ``model.audio_sample_rate``) before the model's Hugging Face
processor sees them. A processor with a narrower pixel range resizes the images again,
so the model sees other sizes than the config says (and a grounding task, which maps
boxes with the config's budget, scores against the wrong size); a Whisper feature
extractor refuses audio at any rate but its own, mid-step. Both are caught once, when
the model is loaded, with the numbers to change.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from transformers import PretrainedConfig, ProcessorMixin

from mmgrpo.config.errors import ConfigError
from mmgrpo.models.adapters import adapter_for

if TYPE_CHECKING:
    from mmgrpo.config import ModelConfig


def require_budgets_fit(
    model_config: ModelConfig, family: str | PretrainedConfig | torch.nn.Module, processor: ProcessorMixin
) -> None:
    """Raise ``ConfigError`` if ``processor`` would resize or refuse media prepared under ``model_config``.

    ``family`` is the model, its config or its ``model_type`` (whatever ``adapter_for`` takes).
    """
    pixel_range = adapter_for(family).image_pixel_range(processor)
    problems = [*_pixel_problems(model_config, pixel_range), *_audio_problems(model_config, processor)]
    if problems:
        raise ConfigError("; ".join(problems))


def _pixel_problems(model_config: ModelConfig, pixel_range: tuple[int | None, int | None] | None) -> Iterator[str]:
    if pixel_range is None:
        return
    low, high = pixel_range
    if (low is not None and model_config.min_pixels < low) or (high is not None and model_config.max_pixels > high):
        yield (
            f"model.min_pixels..max_pixels = {model_config.min_pixels}..{model_config.max_pixels} is outside the "
            f"checkpoint's image processor range {low}..{high}, which would resize the images again; "
            f"set model.min_pixels and model.max_pixels within {low}..{high}"
        )


def _audio_problems(model_config: ModelConfig, processor: ProcessorMixin) -> Iterator[str]:
    extractor = getattr(processor, "feature_extractor", None)
    rate = getattr(extractor, "sampling_rate", None)
    if rate is not None and model_config.audio_sample_rate != rate:
        yield (
            f"model.audio_sample_rate={model_config.audio_sample_rate} but the checkpoint's "
            f"{type(extractor).__name__} takes {rate} Hz audio only; set model.audio_sample_rate={rate}"
        )
