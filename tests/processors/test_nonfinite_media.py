"""NaN or infinite samples and pixels are bad media where they are decoded, naming the file."""

from __future__ import annotations

import numpy as np
import pytest

from processors import AudioBudget, ImageBudget, NonFiniteMediaError, VideoBudget, load_audio, load_image
from processors.video import load_video


@pytest.mark.parametrize("name", ["nan_wav", "inf_wav"])
def test_a_float_wav_with_nonfinite_samples_is_refused_naming_the_file(nonfinite_media, name):
    with pytest.raises(NonFiniteMediaError, match="100 of 16000 audio samples are NaN or infinite") as caught:
        load_audio(nonfinite_media[name], AudioBudget())
    assert caught.value.source == str(nonfinite_media[name])
    assert caught.value.category == "non-finite media"


def test_a_loud_but_finite_wav_still_decodes(nonfinite_media):
    clip = load_audio(nonfinite_media["loud_wav"], AudioBudget())  # the processor's output is checked later
    assert np.isfinite(clip.samples).all() and np.abs(clip.samples).max() > 1e29


def test_an_in_memory_clip_with_nan_is_refused():
    with pytest.raises(NonFiniteMediaError):
        load_audio((np.full(100, np.nan, np.float32), 16_000), AudioBudget())


def test_a_float_tiff_with_nan_is_refused_and_a_finite_one_loads(nonfinite_media):
    with pytest.raises(NonFiniteMediaError, match="25 of 4096 pixel values") as caught:
        load_image(nonfinite_media["nan_tiff"], ImageBudget())
    assert caught.value.source == str(nonfinite_media["nan_tiff"])
    image = load_image(nonfinite_media["float_tiff"], ImageBudget())  # as before: Pillow's conversion
    assert image.mode == "RGB"
    with open(nonfinite_media["nan_tiff"], "rb") as file:  # bytes and PIL images go the same way
        with pytest.raises(NonFiniteMediaError):
            load_image(file.read(), ImageBudget())


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_float_array_with_a_nonfinite_pixel_is_refused_as_such(bad):
    pixels = np.random.default_rng(0).uniform(0, 1, (32, 32, 3))
    pixels[3, 4, 1] = bad
    with pytest.raises(NonFiniteMediaError, match="1 of 3072 pixel values"):
        load_image(pixels, ImageBudget())


def test_a_video_given_as_frames_with_a_nan_frame_is_refused():
    frames = np.random.default_rng(0).uniform(0, 1, (4, 56, 56, 3))
    frames[2, 0, 0, 0] = np.nan
    with pytest.raises(NonFiniteMediaError):
        load_video(frames, VideoBudget(fps=2.0, max_frames=4))
