"""Pure size arithmetic for images and videos, with qwen-vl-utils semantics.

``smart_resize`` and ``sample_frame_count`` reproduce ``qwen_vl_utils.vision_process``
(0.0.14) ``smart_resize`` / ``smart_nframes`` so that our inputs match what the Qwen
processors were trained on; tests compare the two on grids of sizes.
"""

from __future__ import annotations

import math

import numpy as np

from processors.budgets import VideoBudget
from processors.errors import EmptyMediaError, MediaShapeError

# qwen-vl-utils lets a frame's pixel cap fall no lower than 5% above min_pixels.
MIN_PIXELS_HEADROOM = 1.05


def round_by_factor(number: float, factor: int) -> int:
    """The multiple of ``factor`` closest to ``number`` (ties to even, like ``round``)."""
    return round(number / factor) * factor


def ceil_by_factor(number: float, factor: int) -> int:
    """The smallest multiple of ``factor`` that is >= ``number``."""
    return math.ceil(number / factor) * factor


def floor_by_factor(number: float, factor: int) -> int:
    """The largest multiple of ``factor`` that is <= ``number``."""
    return math.floor(number / factor) * factor


def check_image_shape(height: int, width: int, *, max_aspect_ratio: float, source: str = "image") -> None:
    """Raise ``EmptyMediaError`` for a zero-sized image, ``MediaShapeError`` when the longer
    side exceeds ``max_aspect_ratio`` times the shorter (qwen-vl-utils rejects those too)."""
    if height <= 0 or width <= 0:
        raise EmptyMediaError(source, f"zero-sized image ({width}x{height})")
    ratio = max(height, width) / min(height, width)
    if ratio > max_aspect_ratio:
        raise MediaShapeError(source, f"aspect ratio {ratio:.1f} of {width}x{height} exceeds {max_aspect_ratio}")


def smart_resize(
    height: int,
    width: int,
    *,
    factor: int,
    min_pixels: float,
    max_pixels: float,
    max_aspect_ratio: float = 200.0,
    source: str = "image",
) -> tuple[int, int]:
    """Target ``(height, width)``: multiples of ``factor``, area in [min_pixels, max_pixels],
    aspect ratio kept as closely as the rounding allows.

    Raises ``EmptyMediaError`` for a zero-sized input and ``MediaShapeError`` when the
    longer side exceeds ``max_aspect_ratio`` times the shorter or the shorter side would
    shrink to zero under ``max_pixels``; ``source`` names the media.
    """
    check_image_shape(height, width, max_aspect_ratio=max_aspect_ratio, source=source)
    new_height = max(factor, round_by_factor(height, factor))
    new_width = max(factor, round_by_factor(width, factor))
    if new_height * new_width > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        new_height = floor_by_factor(height / scale, factor)
        new_width = floor_by_factor(width / scale, factor)
    elif new_height * new_width < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        new_height = ceil_by_factor(height * scale, factor)
        new_width = ceil_by_factor(width * scale, factor)
    if new_height == 0 or new_width == 0:  # qwen-vl-utils would return a zero side here
        raise MediaShapeError(source, f"{width}x{height} is too elongated to fit {max_pixels} pixels "
                                      f"in multiples of {factor}")
    return new_height, new_width


def sample_frame_count(total_frames: int, source_fps: float, budget: VideoBudget) -> int:
    """How many frames to sample from a video of ``total_frames`` at ``source_fps``.

    ``nframes`` mode: ``nframes`` rounded to ``frame_factor``. ``fps`` mode: the video's
    duration x ``fps``, at least ``min_frames``. Both are then clamped to ``max_frames``
    and the frames the video has, floored to ``frame_factor``. qwen-vl-utils raises
    where the result would fall below ``frame_factor``; we return ``frame_factor``
    instead (the sampler then repeats frames), so a one-frame video still loads.
    """
    step = budget.frame_factor
    if budget.nframes is not None:
        wanted = round_by_factor(budget.nframes, step)
    else:
        wanted = max(total_frames / source_fps * budget.fps, ceil_by_factor(budget.min_frames, step))
    count = floor_by_factor(min(wanted, budget.max_frames, total_frames), step)
    return max(count, step)


def sample_frame_indices(total_frames: int, count: int) -> list[int]:
    """``count`` evenly spaced frame indices from the first frame to the last."""
    return np.linspace(0, total_frames - 1, count).round().astype(int).tolist()


def window_frame_range(start: float, end: float, source_fps: float, total_frames: int) -> tuple[int, int]:
    """First and last index of the frames whose time (index / ``source_fps``) lies in [``start``, ``end``]
    seconds, within the video's ``total_frames`` (qwen-vl-utils' ``video_start`` / ``video_end``); the first
    exceeds the last when no frame does."""
    first = math.ceil(round(start * source_fps, 6))  # rounded first: 0.1 s x 30 fps is frame 3, not 4
    last = math.floor(round(end * source_fps, 6))
    return max(first, 0), min(last, total_frames - 1)


def frame_max_pixels(frame_count: int, budget: VideoBudget) -> float:
    """Per-frame pixel cap: the frame's share of ``total_pixels``, within the budget.

    ``frame_factor`` consecutive frames merge into one temporal patch, so each frame's
    share is ``total_pixels / (frame_count / frame_factor)``.
    """
    share = budget.total_pixels / frame_count * budget.frame_factor
    return min(budget.max_pixels, max(share, int(budget.min_pixels * MIN_PIXELS_HEADROOM)))
