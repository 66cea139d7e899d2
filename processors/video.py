"""Load one video as sampled, resized RGB frames plus the timing the model processor needs.

A video is a file (path or ``file://`` URI, decoded by a registered back end) or a
sequence of frames (image references, or a ``[T, H, W, 3]`` array) played at
``budget.fps``; a :class:`~processors.sources.VideoSpan` wrapping either keeps only its
time window. Frames are sampled by ``fps`` or ``nframes`` (over the window's frames when there is
one) and resized under a per-frame share of ``total_pixels``, with qwen-vl-utils semantics (see ``sizing``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from PIL import Image

from processors.budgets import VideoBudget
from processors.errors import EmptyMediaError, MediaShapeError
from processors.image import RESAMPLE, decode_image, to_rgb
from processors.sizing import (
    frame_max_pixels,
    sample_frame_count,
    sample_frame_indices,
    smart_resize,
    window_frame_range,
)
from processors.sources import VideoSpan, describe, existing_file
from processors.video_backends import VIDEO_BACKENDS, DecodedFrames, FrameChooser, default_video_backend

VideoRef = str | os.PathLike | Sequence[Any] | np.ndarray | VideoSpan
Window = tuple[float, float]  # (start, end) seconds


@dataclass
class VideoClip:
    """Sampled frames of one video and their timing.

    ``fps``, ``frame_indices``, ``source_fps`` and ``total_frames`` are what Hugging Face
    video processors take as ``fps`` / ``VideoMetadata`` to place frames in time.
    """

    frames: np.ndarray  # [T, H, W, 3] uint8, T a multiple of frame_factor
    timestamps: list[float]  # seconds into the source, one per frame
    fps: float  # sampled frames per second of the source (or of its window): qwen-vl-utils' "sample_fps"
    source: str
    frame_indices: list[int]  # position of each frame in the source
    source_fps: float
    total_frames: int


def load_video(ref: VideoRef, budget: VideoBudget = VideoBudget(), *, backend: str | None = None) -> VideoClip:
    """Sample and resize the frames of ``ref`` (inside its window for a ``VideoSpan``) within ``budget``;
    ``backend`` decodes files (None = the default). A window holding no frame raises ``EmptyMediaError``."""
    source = describe(ref)
    window = (ref.start, ref.end) if isinstance(ref, VideoSpan) else None
    video = ref.video if isinstance(ref, VideoSpan) else ref
    choose = partial(_choose_frames, budget=budget, window=window, source=source)
    if isinstance(video, (str, os.PathLike)):
        decoded = VIDEO_BACKENDS.get(backend or default_video_backend())(existing_file(video), choose)
    else:
        decoded = _sample_frame_sequence(video, budget.fps, choose, source)
    first, last = _frame_range(decoded.total_frames, decoded.source_fps, window, source)
    frames = _resize_frames(decoded, budget, source)
    return VideoClip(
        frames=frames,
        timestamps=decoded.timestamps,
        fps=len(decoded.indices) / (last - first + 1) * decoded.source_fps,
        source=source,
        frame_indices=decoded.indices,
        source_fps=decoded.source_fps,
        total_frames=decoded.total_frames,
    )


def _frame_range(total_frames: int, source_fps: float, window: Window | None, source: str) -> tuple[int, int]:
    """First and last frame that may be sampled: the whole video, or the frames inside ``window``."""
    if window is None:
        return 0, total_frames - 1
    first, last = window_frame_range(*window, source_fps, total_frames)
    if first > last:
        raise EmptyMediaError(source, f"no frame inside the window ({total_frames} frames at {source_fps:g} fps)")
    return first, last


def _choose_frames(
    total_frames: int, source_fps: float, *, budget: VideoBudget, window: Window | None, source: str
) -> list[int]:
    first, last = _frame_range(total_frames, source_fps, window, source)
    span = last - first + 1
    return [first + index for index in sample_frame_indices(span, sample_frame_count(span, source_fps, budget))]


def _sample_frame_sequence(
    ref: Sequence[Any] | np.ndarray, fps: float, choose: FrameChooser, source: str
) -> DecodedFrames:
    """Treat a sequence of frames as a video recorded at ``fps`` and sample it like one."""
    if len(ref) == 0:
        raise EmptyMediaError(source, "frame sequence is empty")
    indices = choose(len(ref), fps)
    frames = {index: np.asarray(to_rgb(decode_image(ref[index], describe(ref[index])))) for index in set(indices)}
    return DecodedFrames(
        frames=[frames[index] for index in indices],
        timestamps=[index / fps for index in indices],
        indices=indices,
        total_frames=len(ref),
        source_fps=fps,
    )


def _resize_frames(decoded: DecodedFrames, budget: VideoBudget, source: str) -> np.ndarray:
    """The decoded frames resized to one size within the per-frame pixel budget -> [T, H, W, 3]."""
    frames = decoded.frames
    height, width = frames[0].shape[:2]
    for index, frame in zip(decoded.indices, frames):
        if frame.shape[:2] != (height, width):
            raise MediaShapeError(source, f"frame {index} is {frame.shape[1]}x{frame.shape[0]}, "
                                          f"frame {decoded.indices[0]} is {width}x{height}")
    new_height, new_width = smart_resize(
        height,
        width,
        factor=budget.factor,
        min_pixels=budget.min_pixels,
        max_pixels=frame_max_pixels(len(frames), budget),
        max_aspect_ratio=budget.max_aspect_ratio,
        source=source,
    )
    if (new_height, new_width) == (height, width):
        return np.stack(frames)
    return np.stack([
        np.asarray(Image.fromarray(frame).resize((new_width, new_height), RESAMPLE)) for frame in frames
    ])
