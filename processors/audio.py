"""Load one audio clip as mono float32 samples at the model's rate, within a length budget.

Accepted references: a path or ``file://`` URI, encoded bytes, an ``(array, sample_rate)``
pair, or a Hugging Face ``datasets`` audio dict (``{"array", "sampling_rate"}`` decoded,
``{"bytes", "path"}`` not). Encoded audio is read with soundfile (wav, flac, ogg, mp3)
and, for anything it does not recognise (m4a, mp4, ...), with PyAV.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from functools import singledispatch
from typing import Any

import av
import numpy as np
import soundfile

from processors.budgets import AudioBudget
from processors.errors import (
    CorruptMediaError, EmptyMediaError, MediaShapeError, MissingMediaError,
)
from processors.finite import require_finite
from processors.sources import describe, existing_file

AudioRef = str | os.PathLike | bytes | tuple[np.ndarray, int] | dict[str, Any]
Encoded = os.PathLike | bytes
DecodedAudio = tuple[np.ndarray, int]  # ([S, C] float32 samples, sample rate)


@dataclass
class AudioClip:
    """Mono samples of one clip at ``sample_rate``."""

    samples: np.ndarray  # [S] float32
    sample_rate: int
    source: str

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.sample_rate


def load_audio(ref: AudioRef, budget: AudioBudget = AudioBudget()) -> AudioClip:
    """Decode ``ref``, downmix to mono, crop to ``max_seconds`` and resample to ``sample_rate``."""
    source = describe(ref)
    samples, rate = decode_audio(ref, source, budget.max_seconds)  # [S, C]
    if samples.size == 0:
        raise EmptyMediaError(source, "no audio samples")
    require_finite(samples, source, "audio samples")
    mono = _crop(samples.mean(axis=1), rate, budget.max_seconds)  # [S]
    mono = _crop(resample(mono, rate, budget.sample_rate), budget.sample_rate, budget.max_seconds)
    return AudioClip(samples=mono.astype(np.float32), sample_rate=budget.sample_rate, source=source)


def resample(samples: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """Polyphase resampling (anti-aliased) of ``samples`` [S] from ``rate`` to ``target_rate``."""
    if rate == target_rate:
        return samples
    from scipy.signal import resample_poly  # imported here: scipy.signal takes a second, most runs never resample

    common = math.gcd(rate, target_rate)
    return resample_poly(samples, target_rate // common, rate // common)


def _crop(samples: np.ndarray, rate: int, max_seconds: float | None) -> np.ndarray:
    return samples if max_seconds is None else samples[: math.ceil(max_seconds * rate)]


@singledispatch
def decode_audio(ref: object, source: str, max_seconds: float | None = None) -> DecodedAudio:
    """Decode any supported reference to ``([S, C] float32, rate)``, reading at most about
    ``max_seconds`` of an encoded file."""
    raise TypeError(f"{source}: unsupported audio reference of type {type(ref).__name__}; expected a path, "
                    "bytes, an (array, sample_rate) pair or an {'array', 'sampling_rate'} dict")


@decode_audio.register(type(None))
def _decode_none(ref: None, source: str, max_seconds: float | None = None) -> DecodedAudio:
    raise MissingMediaError(source, "no audio reference (None)")


@decode_audio.register(str)
@decode_audio.register(os.PathLike)
def _decode_path(ref: str | os.PathLike, source: str, max_seconds: float | None = None) -> DecodedAudio:
    return _decode_encoded(existing_file(ref), source, max_seconds)


@decode_audio.register(bytes)
def _decode_bytes(ref: bytes, source: str, max_seconds: float | None = None) -> DecodedAudio:
    if not ref:
        raise EmptyMediaError(source, "no audio bytes")
    return _decode_encoded(ref, source, max_seconds)


@decode_audio.register(tuple)
def _decode_pair(ref: tuple[np.ndarray, int], source: str, max_seconds: float | None = None) -> DecodedAudio:
    if len(ref) != 2:
        raise TypeError(f"{source}: an audio pair must be (array, sample_rate), got {len(ref)} items")
    samples, rate = ref
    if not (isinstance(rate, (int, np.integer)) and rate > 0):
        raise MediaShapeError(source, f"sample rate must be a positive integer, got {rate!r}")
    return _channels_last(np.asarray(samples), source), int(rate)


@decode_audio.register(dict)
def _decode_dict(ref: dict[str, Any], source: str, max_seconds: float | None = None) -> DecodedAudio:
    if ref.get("array") is not None:
        return _decode_pair((ref["array"], ref.get("sampling_rate")), source)
    if ref.get("bytes"):
        return _decode_bytes(ref["bytes"], source, max_seconds)
    if ref.get("path"):
        return _decode_path(ref["path"], source, max_seconds)
    raise MissingMediaError(source, "audio dict has none of 'array', 'bytes', 'path'")


def _channels_last(samples: np.ndarray, source: str) -> np.ndarray:
    """An in-memory clip as [S, C] float32; the shorter axis of a 2-D array is the channels."""
    if samples.ndim == 1:
        samples = samples[:, None]
    elif samples.ndim != 2:
        raise MediaShapeError(source, f"expected a [samples] or 2-D [samples, channels] array, got {samples.shape}")
    elif samples.shape[0] < samples.shape[1]:
        samples = samples.T  # [C, S] -> [S, C]
    return _as_float32(samples, source)


def _as_float32(samples: np.ndarray, source: str) -> np.ndarray:
    """Integer PCM scaled to [-1, 1); floats kept as they are."""
    if np.issubdtype(samples.dtype, np.floating):
        return samples.astype(np.float32)
    if not np.issubdtype(samples.dtype, np.integer):
        raise MediaShapeError(source, f"unsupported sample dtype {samples.dtype}")
    limits = np.iinfo(samples.dtype)
    middle = (int(limits.max) + int(limits.min) + 1) / 2  # 0 for signed, 128 for uint8
    return ((samples - middle) / (limits.max + 1 - middle)).astype(np.float32)


def _decode_encoded(data: Encoded, source: str, max_seconds: float | None) -> DecodedAudio:
    """Try soundfile, then PyAV; a file neither can read is corrupt."""
    try:
        return _read_with_soundfile(data, max_seconds)
    except soundfile.LibsndfileError as soundfile_error:
        try:
            return _read_with_pyav(data, source, max_seconds)
        except av.error.FFmpegError as pyav_error:
            raise CorruptMediaError(
                source, f"cannot decode audio (soundfile: {soundfile_error}; PyAV: {pyav_error})"
            ) from pyav_error


def _readable(data: Encoded) -> str | io.BytesIO:
    return io.BytesIO(data) if isinstance(data, bytes) else os.fspath(data)


def _frame_limit(rate: int, max_seconds: float | None) -> int | None:
    return None if max_seconds is None else math.ceil(max_seconds * rate)


def _read_with_soundfile(data: Encoded, max_seconds: float | None) -> DecodedAudio:
    with soundfile.SoundFile(_readable(data)) as file:
        limit = _frame_limit(file.samplerate, max_seconds)
        samples = file.read(-1 if limit is None else limit, dtype="float32", always_2d=True)  # [S, C]
        return samples, file.samplerate


def _read_with_pyav(data: Encoded, source: str, max_seconds: float | None) -> DecodedAudio:
    with av.open(_readable(data)) as container:
        if not container.streams.audio:
            raise EmptyMediaError(source, "no audio stream")
        stream = container.streams.audio[0]
        limit = _frame_limit(stream.rate, max_seconds)
        to_planar_float = av.AudioResampler(format="fltp")  # keeps the layout and rate
        chunks, count = [], 0
        for frame in container.decode(stream):
            for planar in to_planar_float.resample(frame):
                chunks.append(planar.to_ndarray())  # [C, n]
                count += chunks[-1].shape[1]
            if limit is not None and count >= limit:
                break
    if not chunks:
        raise EmptyMediaError(source, "audio stream has no samples")
    return np.concatenate(chunks, axis=1).T, stream.rate  # [C, S] -> [S, C]
