"""Media fixtures for the processor tests: every file is generated in a tmp dir, nothing downloaded.

Helpers are handed out as fixtures because pytest runs with ``--import-mode=importlib``,
where test modules cannot import a sibling helper module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile


class FrameCode:
    """Frame i of a generated video is filled with a flat colour that encodes i."""

    step = 8  # colour distance between consecutive codes; distinct for up to 32 frames

    def colour(self, index: int) -> tuple[int, int, int]:
        return (index * self.step, 255 - index * self.step, 128)

    def index_of(self, frame: np.ndarray, count: int) -> int:
        """Which of the first ``count`` codes ``frame`` [H, W, 3] shows (nearest to its mean colour)."""
        mean = frame.reshape(-1, 3).mean(axis=0)
        codes = np.array([self.colour(index) for index in range(count)])
        return int(np.argmin(np.abs(codes - mean).sum(axis=1)))


def make_tone(frequency: float, seconds: float, rate: int, amplitude: float = 0.5) -> np.ndarray:
    """A sine tone [S] float32."""
    return (amplitude * np.sin(2 * np.pi * frequency * np.arange(int(seconds * rate)) / rate)).astype(np.float32)


@pytest.fixture
def frame_code() -> FrameCode:
    return FrameCode()


@pytest.fixture
def tone() -> Callable[..., np.ndarray]:
    """``tone(frequency, seconds, rate, amplitude=0.5) -> [S] float32``."""
    return make_tone


@pytest.fixture
def video_file(tmp_path: Path, frame_code: FrameCode) -> Callable[..., Path]:
    """``video_file(frames=20, fps=10, width=64, height=48) -> Path``: an mpeg4 file whose
    frame i shows ``frame_code.colour(i)``."""

    def make(frames: int = 20, fps: int = 10, width: int = 64, height: int = 48) -> Path:
        path = tmp_path / f"video_{frames}x{fps}_{width}x{height}.mp4"
        with av.open(str(path), "w") as container:
            stream = container.add_stream("mpeg4", rate=fps)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            for index in range(frames):
                pixels = np.full((height, width, 3), frame_code.colour(index), dtype=np.uint8)
                container.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
            container.mux(stream.encode())
        return path

    return make


@pytest.fixture
def audio_file(tmp_path: Path) -> Callable[..., Path]:
    """``audio_file(samples [S] or [S, C], rate, suffix=".wav") -> Path``, written with soundfile."""

    def make(samples: np.ndarray, rate: int, suffix: str = ".wav") -> Path:
        path = tmp_path / f"audio_{rate}{suffix}"
        soundfile.write(path, samples, rate)
        return path

    return make


@pytest.fixture
def aac_file(tmp_path: Path) -> Callable[..., Path]:
    """``aac_file(channels [C, S] float32, rate) -> Path``: an m4a that soundfile cannot read."""

    def make(channels: np.ndarray, rate: int) -> Path:
        path = tmp_path / f"audio_{rate}.m4a"
        layout = "mono" if channels.shape[0] == 1 else "stereo"
        with av.open(str(path), "w") as container:
            stream = container.add_stream("aac", rate=rate)
            stream.layout = layout
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(channels), format="fltp", layout=layout)
            frame.sample_rate = rate
            container.mux(stream.encode(frame))
            container.mux(stream.encode())
        return path

    return make
