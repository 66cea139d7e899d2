"""Audio loading: formats, resampling that keeps pitch, mono downmix, length budget, typed errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from processors import AudioBudget, load_audio
from processors.errors import CorruptMediaError, EmptyMediaError, MediaShapeError, MissingMediaError, NonFiniteMediaError


def peak_frequency(samples: np.ndarray, rate: int) -> float:
    """Frequency (Hz) of the strongest FFT bin of ``samples`` [S]."""
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


@pytest.mark.parametrize("source_rate", [8000, 22050, 44100, 48000])
def test_resampling_keeps_the_tone_frequency(tone: Callable[..., np.ndarray], source_rate: int) -> None:
    clip = load_audio((tone(440.0, 1.0, source_rate), source_rate), AudioBudget(sample_rate=16000))
    assert clip.sample_rate == 16000 and clip.samples.dtype == np.float32
    assert len(clip.samples) == 16000
    assert peak_frequency(clip.samples, 16000) == pytest.approx(440.0, abs=2.0)
    assert np.abs(clip.samples).max() == pytest.approx(0.5, abs=0.02)


def test_resampling_removes_frequencies_above_the_new_nyquist(tone: Callable[..., np.ndarray]) -> None:
    # 11 kHz is above 8 kHz (Nyquist at 16 kHz): naive decimation would alias it to 5 kHz.
    clip = load_audio((tone(11000.0, 1.0, 48000), 48000), AudioBudget(sample_rate=16000))
    interior = clip.samples[800:-800]  # away from the filter's edge transients
    assert np.sqrt(np.mean(interior**2)) < 0.01


@pytest.mark.parametrize("suffix", [".wav", ".flac", ".ogg"])
def test_soundfile_formats_decode_to_mono(
    audio_file: Callable[..., Path], tone: Callable[..., np.ndarray], suffix: str
) -> None:
    stereo = np.stack([tone(440.0, 1.0, 22050), np.zeros(22050, np.float32)], axis=1)  # [S, 2]
    clip = load_audio(audio_file(stereo, 22050, suffix), AudioBudget())
    assert clip.samples.ndim == 1 and len(clip.samples) == 16000
    assert peak_frequency(clip.samples, 16000) == pytest.approx(440.0, abs=2.0)
    assert np.abs(clip.samples).max() == pytest.approx(0.25, abs=0.03)  # averaged with a silent channel


def test_other_containers_decode_with_pyav(aac_file: Callable[..., Path], tone: Callable[..., np.ndarray]) -> None:
    clip = load_audio(aac_file(tone(660.0, 1.0, 44100)[None], 44100), AudioBudget())
    assert clip.sample_rate == 16000 and len(clip.samples) >= 16000  # AAC adds priming samples
    assert peak_frequency(clip.samples, 16000) == pytest.approx(660.0, abs=3.0)


def test_downmix_averages_channels_in_either_layout(tone: Callable[..., np.ndarray]) -> None:
    left, right = tone(440.0, 0.5, 16000), tone(440.0, 0.5, 16000, amplitude=0.1)
    expected = (left + right) / 2
    channels_last = load_audio((np.stack([left, right], axis=1), 16000), AudioBudget())
    channels_first = load_audio((np.stack([left, right]), 16000), AudioBudget())
    assert np.allclose(channels_last.samples, expected, atol=1e-6)
    assert np.allclose(channels_first.samples, expected, atol=1e-6)


def test_max_seconds_crops_and_none_keeps_everything(
    audio_file: Callable[..., Path], tone: Callable[..., np.ndarray]
) -> None:
    path = audio_file(tone(440.0, 3.0, 16000), 16000)
    assert len(load_audio(path, AudioBudget(max_seconds=1.0)).samples) == 16000
    assert len(load_audio(path, AudioBudget(max_seconds=None)).samples) == 48000
    resampled = load_audio((tone(440.0, 3.0, 44100), 44100), AudioBudget(max_seconds=1.5))
    assert len(resampled.samples) == 24000


def test_every_reference_kind_loads_the_same_clip(
    audio_file: Callable[..., Path], tone: Callable[..., np.ndarray]
) -> None:
    samples = tone(440.0, 0.5, 16000)
    path = audio_file(samples, 16000, ".flac")
    refs = [
        str(path),
        path,
        path.as_uri(),
        path.read_bytes(),
        {"bytes": path.read_bytes(), "path": "clip.flac"},
        {"array": samples, "sampling_rate": 16000, "path": None},
        (samples, 16000),
    ]
    for ref in refs:
        assert np.allclose(load_audio(ref, AudioBudget()).samples, samples, atol=1e-4), ref


def test_integer_pcm_is_scaled_to_unit_range() -> None:
    pcm16 = np.array([0, 16384, -32768], dtype=np.int16)
    assert load_audio((pcm16, 16000), AudioBudget()).samples.tolist() == [0.0, 0.5, -1.0]
    pcm8 = np.array([128, 192, 0], dtype=np.uint8)
    assert load_audio((pcm8, 16000), AudioBudget()).samples.tolist() == [0.0, 0.5, -1.0]


def test_bad_audio_files_raise_typed_errors_naming_the_file(
    tmp_path: Path, audio_file: Callable[..., Path], video_file: Callable[..., Path]
) -> None:
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "garbage.wav").write_bytes(b"RIFF but not really audio" * 10)
    cases = {
        tmp_path / "missing.wav": MissingMediaError,
        tmp_path / "empty.wav": EmptyMediaError,
        tmp_path / "garbage.wav": CorruptMediaError,
        audio_file(np.zeros((0, 2), np.float32), 16000): EmptyMediaError,  # a header, no samples
        video_file(): EmptyMediaError,  # no audio stream
    }
    for path, error in cases.items():
        with pytest.raises(error, match=str(path)) as raised:
            load_audio(path, AudioBudget())
        assert raised.value.source == str(path)


def test_bad_in_memory_audio_raises_clear_errors() -> None:
    with pytest.raises(TypeError, match="sample_rate"):
        load_audio(np.zeros(100, np.float32), AudioBudget())  # a bare array has no rate
    with pytest.raises(MediaShapeError, match="sample rate"):
        load_audio({"array": np.zeros(100, np.float32), "sampling_rate": None}, AudioBudget())
    with pytest.raises(NonFiniteMediaError, match="NaN"):
        load_audio((np.full(100, np.nan, np.float32), 16000), AudioBudget())
    with pytest.raises(MediaShapeError, match="2-D"):
        load_audio((np.zeros((2, 2, 100), np.float32), 16000), AudioBudget())
    with pytest.raises(EmptyMediaError):
        load_audio((np.zeros(0, np.float32), 16000), AudioBudget())
