"""``audio_count``: count the beeps in a short noisy clip.

Beeps are sine tones with random pitch, length and loudness, separated by random gaps of at
least ``min_gap_s``, over white noise; each beep has short linear fades so that it starts and
ends cleanly. Written as 16-bit PCM wav with soundfile. The answer is an ``int``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import soundfile

from data_recipes.generators.base import GENERATORS, Example, MediaFile, check_range


def wav_bytes(samples: np.ndarray, sample_rate: int) -> bytes:
    """Encode mono float samples in [-1, 1] as 16-bit PCM wav."""
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, sample_rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def beep_starts(
    rng: np.random.Generator, lengths: np.ndarray, total: float, min_gap: float, margin: float
) -> np.ndarray:
    """Start times (s) of beeps of the given lengths in a ``total``-second clip, in order.

    The slack left after beeps, minimum gaps and edge margins is split at random (Dirichlet)
    into the ``n + 1`` spaces around the beeps, so any valid layout can occur.
    """
    n = len(lengths)
    slack = total - lengths.sum() - (n - 1) * min_gap - 2 * margin
    if slack < 0:
        raise ValueError(f"{n} beeps do not fit in {total} s; lengthen duration_s or shorten the beeps")
    spaces = slack * rng.dirichlet(np.ones(n + 1))
    spaces[1:-1] += min_gap
    spaces[0] += margin
    return np.cumsum(spaces[:-1]) + np.concatenate([[0.0], np.cumsum(lengths[:-1])])


@GENERATORS.register("audio_count")
@dataclass(frozen=True)
class AudioCount:
    """Clips of N beeps with varied pitch, length, loudness and gaps over noise; "How many beeps?"."""

    task: ClassVar[str] = "audio_count"

    sample_rate: int = 16000
    duration_s: float = 3.0
    min_beeps: int = 1
    max_beeps: int = 6
    min_beep_s: float = 0.08
    max_beep_s: float = 0.2
    min_gap_s: float = 0.12
    min_pitch_hz: float = 300.0
    max_pitch_hz: float = 1500.0
    min_amplitude: float = 0.3
    max_amplitude: float = 0.8
    noise_amplitude: float = 0.02
    """Standard deviation of the background white noise."""
    fade_s: float = 0.005
    margin_s: float = 0.1
    """Silence (noise only) kept at each end of the clip."""

    def __post_init__(self) -> None:
        check_range("beeps", self.min_beeps, self.max_beeps, minimum=1)

    def _beep(self, rng: np.random.Generator, length_s: float) -> np.ndarray:
        """One faded sine tone of random pitch and loudness."""
        t = np.arange(int(round(length_s * self.sample_rate))) / self.sample_rate
        pitch = rng.uniform(self.min_pitch_hz, self.max_pitch_hz)
        amplitude = rng.uniform(self.min_amplitude, self.max_amplitude)
        fade = np.clip(np.minimum(t, t[-1] - t) / self.fade_s, 0.0, 1.0)
        return amplitude * fade * np.sin(2 * np.pi * pitch * t)

    def example(self, rng: np.random.Generator) -> Example:
        n = int(rng.integers(self.min_beeps, self.max_beeps + 1))
        lengths = rng.uniform(self.min_beep_s, self.max_beep_s, size=n)
        starts = beep_starts(rng, lengths, self.duration_s, self.min_gap_s, self.margin_s)
        clip = rng.normal(0.0, self.noise_amplitude, size=int(self.duration_s * self.sample_rate))
        for start, length in zip(starts, lengths):
            beep = self._beep(rng, float(length))
            first = int(round(start * self.sample_rate))
            clip[first : first + len(beep)] += beep
        fields = {
            "problem": "How many beeps are there in the audio?",
            "answer": n,
            "sample_rate": self.sample_rate,
            "beeps": [[round(float(s), 4), round(float(s + l), 4)] for s, l in zip(starts, lengths)],
        }
        return Example(fields, MediaFile("audio", ".wav", wav_bytes(np.clip(clip, -1.0, 1.0), self.sample_rate)))
