"""Size budgets for each modality: how many pixels, frames and samples a model gets.

Defaults follow qwen-vl-utils 0.0.14 (``qwen_vl_utils/vision_process.py``), where
sizes are counted in merged patches: ``factor`` = patch size 14 x spatial merge 2 = 28
pixels, an image gets 4..16384 such tokens, a video frame 128..768, a whole video
``MODEL_SEQ_LEN`` (128000) x 0.9, frames are sampled at 2 fps in pairs
(``FRAME_FACTOR`` = 2) between 4 and 768. The audio defaults are the Whisper feature
extractor's (16 kHz, 30 s chunks) that Qwen2-Audio uses.
Families with other patch sizes (Qwen3-VL: 16 x 2 = 32) override ``factor``.
"""

from __future__ import annotations

from dataclasses import dataclass

QWEN_FACTOR = 28  # vision patch 14 x spatial merge 2


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True)
class ImageBudget:
    """Pixel budget of one image."""

    min_pixels: int = 4 * QWEN_FACTOR**2
    """Fewest pixels after resizing; smaller images are scaled up."""
    max_pixels: int = 16384 * QWEN_FACTOR**2
    """Most pixels after resizing; larger images are scaled down."""
    factor: int = QWEN_FACTOR
    """Height and width become multiples of this (patch size x spatial merge size)."""
    max_aspect_ratio: float = 200.0
    """Longer side / shorter side above this is rejected as unusable."""

    def __post_init__(self) -> None:
        _require(self.factor > 0, f"factor must be positive, got {self.factor}")
        _require(0 < self.min_pixels <= self.max_pixels,
                 f"need 0 < min_pixels <= max_pixels, got {self.min_pixels} and {self.max_pixels}")
        _require(self.max_aspect_ratio >= 1, f"max_aspect_ratio must be >= 1, got {self.max_aspect_ratio}")


@dataclass(frozen=True)
class VideoBudget:
    """Frame and pixel budget of one video."""

    fps: float = 2.0
    """Frames sampled per second of video (ignored when ``nframes`` is set)."""
    nframes: int | None = None
    """Exact number of frames to sample (rounded to ``frame_factor``); overrides ``fps``."""
    min_frames: int = 4
    """Fewest frames sampled in ``fps`` mode (never more than the video has)."""
    max_frames: int = 768
    """Most frames sampled in either mode; wins over ``min_frames``."""
    min_pixels: int = 128 * QWEN_FACTOR**2
    """Fewest pixels per frame after resizing."""
    max_pixels: int = 768 * QWEN_FACTOR**2
    """Most pixels per frame after resizing (further capped by ``total_pixels``)."""
    total_pixels: int = int(128000 * QWEN_FACTOR**2 * 0.9)
    """Pixel budget of the whole clip, shared between its frames."""
    factor: int = QWEN_FACTOR
    """Frame height and width become multiples of this."""
    frame_factor: int = 2
    """The number of frames is a multiple of this (temporal patch size)."""
    max_aspect_ratio: float = 200.0
    """Longer side / shorter side above this is rejected as unusable."""

    def __post_init__(self) -> None:
        _require(self.fps > 0, f"fps must be positive, got {self.fps}")
        _require(self.nframes is None or self.nframes > 0, f"nframes must be positive, got {self.nframes}")
        _require(self.frame_factor > 0, f"frame_factor must be positive, got {self.frame_factor}")
        _require(self.min_frames > 0, f"min_frames must be positive, got {self.min_frames}")
        _require(self.max_frames >= self.frame_factor,
                 f"max_frames must be >= frame_factor {self.frame_factor}, got {self.max_frames}")
        _require(self.factor > 0, f"factor must be positive, got {self.factor}")
        _require(0 < self.min_pixels <= self.max_pixels,
                 f"need 0 < min_pixels <= max_pixels, got {self.min_pixels} and {self.max_pixels}")
        _require(self.total_pixels > 0, f"total_pixels must be positive, got {self.total_pixels}")


@dataclass(frozen=True)
class AudioBudget:
    """Sample-rate and length budget of one audio clip."""

    sample_rate: int = 16000
    """Rate the clip is resampled to (the model's feature extractor rate)."""
    max_seconds: float | None = 30.0
    """Longer clips are cropped to their first ``max_seconds``; None keeps everything."""

    def __post_init__(self) -> None:
        _require(self.sample_rate > 0, f"sample_rate must be positive, got {self.sample_rate}")
        _require(self.max_seconds is None or self.max_seconds > 0,
                 f"max_seconds must be positive or None, got {self.max_seconds}")
