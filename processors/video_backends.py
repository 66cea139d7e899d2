"""Video decoding back ends: read chosen frames of a file at full resolution.

A back end is a function ``(path, choose) -> DecodedFrames``. It learns the video's
frame count and rate, asks ``choose(total_frames, source_fps)`` which frame indices
to keep, and decodes only those. decord (random access, qwen-vl-utils' back end) is the
default when installed; PyAV, always installed, is the fallback. Failures become typed
``MediaError``s naming the file.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from mmgrpo.registry import Registry
from processors.errors import CorruptMediaError, EmptyMediaError

FrameChooser = Callable[[int, float], list[int]]  # (total_frames, source_fps) -> frame indices
VideoBackend = Callable[[Path, FrameChooser], "DecodedFrames"]

VIDEO_BACKENDS: Registry[VideoBackend] = Registry("video back end")


def default_video_backend() -> str:
    """``decord`` when it is installed (as the dev extra does), else ``pyav``."""
    return "decord" if importlib.util.find_spec("decord") is not None else "pyav"


@dataclass
class DecodedFrames:
    """Frames chosen from a video, before any resizing."""

    frames: list[np.ndarray]  # each [H, W, 3] uint8, in the order of ``indices``
    timestamps: list[float]  # presentation time of each frame, seconds
    indices: list[int]  # positions of the frames in the source
    total_frames: int
    source_fps: float


def _check_stream(path: Path, total_frames: int, fps: float) -> None:
    if total_frames <= 0:
        raise EmptyMediaError(path, "video has no frames")
    if fps <= 0:
        raise CorruptMediaError(path, "video stream has no frame rate")


@contextlib.contextmanager
def _pyav_errors(path: Path) -> Iterator[None]:
    try:
        yield
    except av.error.FFmpegError as error:
        raise CorruptMediaError(path, f"cannot decode video: {error}") from error


def _count_packets(path: Path) -> int:
    """Frame count from demuxing (no decoding), for containers whose header lacks it."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return sum(1 for packet in container.demux(stream) if packet.size)


@VIDEO_BACKENDS.register("pyav")
def read_with_pyav(path: Path, choose: FrameChooser) -> DecodedFrames:
    """Decode sequentially with PyAV, keeping the chosen frames and stopping after the last."""
    with _pyav_errors(path), av.open(str(path)) as container:
        if not container.streams.video:
            raise EmptyMediaError(path, "no video stream")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"  # let FFmpeg decode on several threads
        fps = float(stream.average_rate or stream.guessed_rate or 0)
        total_frames = stream.frames or _count_packets(path)
        _check_stream(path, total_frames, fps)
        indices = choose(total_frames, fps)
        wanted = set(indices)
        kept: dict[int, tuple[np.ndarray, float]] = {}
        for position, frame in enumerate(container.decode(stream)):
            if position in wanted:
                time = frame.time if frame.time is not None else position / fps
                kept[position] = (frame.to_ndarray(format="rgb24"), time)
            if position >= indices[-1]:
                break
    missing = sorted(wanted - kept.keys())
    if missing:
        raise CorruptMediaError(path, f"header declares {total_frames} frames but frame {missing[0]} does not decode")
    return DecodedFrames(
        frames=[kept[index][0] for index in indices],
        timestamps=[kept[index][1] for index in indices],
        indices=indices,
        total_frames=total_frames,
        source_fps=fps,
    )


@VIDEO_BACKENDS.register("decord")
def read_with_decord(path: Path, choose: FrameChooser) -> DecodedFrames:
    """Random-access decoding with decord (``pip install decord``)."""
    try:
        import decord
    except ImportError as error:
        raise ImportError("the 'decord' video back end needs `pip install decord`; or use 'pyav'") from error
    try:
        reader = decord.VideoReader(str(path))
        total_frames, fps = len(reader), float(reader.get_avg_fps())
        _check_stream(path, total_frames, fps)
        indices = choose(total_frames, fps)
        frames = reader.get_batch(indices).asnumpy()  # [T, H, W, 3]
        starts = reader.get_frame_timestamp(indices)[:, 0]  # [T] (start, end) pairs -> start
    except (RuntimeError, decord.DECORDError) as error:
        raise CorruptMediaError(path, f"cannot decode video: {error}") from error
    return DecodedFrames(
        frames=list(frames),
        timestamps=[float(start) for start in starts],
        indices=indices,
        total_frames=total_frames,
        source_fps=fps,
    )
