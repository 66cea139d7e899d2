"""The modality registry: one uniform ``load(ref, budget)`` per modality; budget validation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mmgrpo.registry import RegistryError
from processors import (
    MODALITIES,
    AudioBudget,
    AudioClip,
    ImageBudget,
    MediaError,
    MissingMediaError,
    VideoBudget,
    VideoClip,
)


def test_each_modality_loads_through_the_same_call(
    tmp_path: Path, video_file: Callable[..., Path], audio_file: Callable[..., Path]
) -> None:
    image_path = tmp_path / "image.png"
    Image.new("RGB", (64, 48)).save(image_path)
    refs = {
        "image": (image_path, Image.Image),
        "video": (video_file(), VideoClip),
        "audio": (audio_file(np.zeros(1600, np.float32), 16000), AudioClip),
    }
    assert MODALITIES.names() == sorted(refs)
    for name, (ref, loaded_type) in refs.items():
        modality = MODALITIES.get(name)
        assert isinstance(modality.load(ref, modality.budget_type()), loaded_type)
        with pytest.raises(MissingMediaError):
            modality.load(tmp_path / f"missing_{name}", modality.budget_type())


def test_unknown_modality_lists_the_known_ones() -> None:
    with pytest.raises(RegistryError, match="audio, image, video"):
        MODALITIES.get("smell")


def test_media_errors_are_value_errors_with_source_and_reason() -> None:
    error = MissingMediaError("/data/cat.png", "file does not exist")
    assert isinstance(error, MediaError) and isinstance(error, ValueError)
    assert (error.source, error.reason, str(error)) == ("/data/cat.png", "file does not exist",
                                                       "/data/cat.png: file does not exist")


@pytest.mark.parametrize("make_budget", [
    lambda: ImageBudget(min_pixels=100, max_pixels=10),
    lambda: ImageBudget(factor=0),
    lambda: VideoBudget(fps=0),
    lambda: VideoBudget(max_frames=1),
    lambda: VideoBudget(min_frames=0),
    lambda: VideoBudget(nframes=0),
    lambda: AudioBudget(sample_rate=0),
    lambda: AudioBudget(max_seconds=-1.0),
])
def test_inconsistent_budgets_are_rejected(make_budget: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        make_budget()
