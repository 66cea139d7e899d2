"""``video_count``: count the distinct objects that appear over a short clip.

Each object sits at its own place and is visible for one contiguous run of frames (at least
``min_visible_frames``), so objects come and go; the answer (an ``int``) is how many appeared.
Clips are small H.264 mp4 files written with PyAV.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import ClassVar, Sequence

import av
from av.video.reformatter import Interpolation
import numpy as np
from PIL import Image

from data_recipes.generators.base import GENERATORS, Example, MediaFile, check_range
from data_recipes.generators.scenes import (
    COLOURS,
    DEFAULT_BACKGROUND,
    SHAPES,
    check_names,
    check_rgb,
    place,
    random_attributes,
    render,
)


CHROMA_BLOCK = 2  # yuv420p stores colour per 2x2 pixels
EXACT_SCALING = Interpolation.BILINEAR | Interpolation.BITEXACT | Interpolation.ACCURATE_RND


def mp4_bytes(frames: Sequence[Image.Image], fps: int, crf: int) -> bytes:
    """Encode RGB frames as an H.264 (yuv420p) mp4; a low ``crf`` keeps small shapes crisp."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height = frames[0].size
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": str(crf), "x264-params": "threads=1:lookahead-threads=1:sliced-threads=0"}
        stream.codec_context.thread_count = 1  # one thread: the same bytes far more often (not always, see make.py)
        for image in frames:
            # Converted to yuv420p before the encoder sees it, by swscale on one thread with its bit-exact
            # C paths: left to the encoder, or to swscale's default (threads by CPU count, SIMD), identical
            # frames now and then gave other bytes under CPU load.
            frame = av.VideoFrame.from_image(image).reformat(format="yuv420p", threads=1, interpolation=EXACT_SCALING)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))  # flush delayed frames
    return buffer.getvalue()


def visible_runs(rng: np.random.Generator, n: int, num_frames: int, min_visible: int) -> list[tuple[int, int]]:
    """``n`` random ``[start, end)`` frame runs, each at least ``min_visible`` frames long."""
    runs = []
    for _ in range(n):
        length = int(rng.integers(min_visible, num_frames + 1))
        start = int(rng.integers(0, num_frames - length + 1))
        runs.append((start, start + length))
    return runs


@GENERATORS.register("video_count")
@dataclass(frozen=True)
class VideoCount:
    """Clips of shapes appearing and disappearing; "How many distinct objects appear in the video?"."""

    task: ClassVar[str] = "video_count"

    frame_size: int = 64
    num_frames: int = 12
    fps: int = 4
    min_objects: int = 1
    max_objects: int = 5
    object_px: int = 12
    min_visible_frames: int = 2
    shapes: tuple[str, ...] = SHAPES
    colours: tuple[str, ...] = tuple(COLOURS)
    background: tuple[int, ...] = DEFAULT_BACKGROUND
    min_gap: int = 3
    crf: int = 12
    """x264 quality (0 = lossless, 51 = worst)."""

    def __post_init__(self) -> None:
        check_range("objects", self.min_objects, self.max_objects, minimum=1)
        check_range("visible_frames", self.min_visible_frames, self.num_frames, minimum=1)
        check_names(self.shapes, self.colours)
        check_rgb(self.background)
        if self.frame_size % CHROMA_BLOCK or self.object_px % CHROMA_BLOCK:
            sizes = f"{self.frame_size}, {self.object_px}"
            raise ValueError(f"frame_size and object_px must be even for yuv420p video, got {sizes}")

    def example(self, rng: np.random.Generator) -> Example:
        n = int(rng.integers(self.min_objects, self.max_objects + 1))
        attributes = random_attributes(rng, n, self.shapes, self.colours, {f"{self.object_px}px": self.object_px})
        objects = place(rng, attributes, self.frame_size, min_gap=self.min_gap, align=CHROMA_BLOCK)
        runs = visible_runs(rng, n, self.num_frames, self.min_visible_frames)
        background = tuple(self.background)
        frames = [
            render([o for o, (start, end) in zip(objects, runs) if start <= t < end], self.frame_size, background)
            for t in range(self.num_frames)
        ]
        fields = {
            "problem": "How many distinct objects appear in the video?",
            "answer": n,
            "num_frames": self.num_frames,
            "fps": self.fps,
            "objects": [{**o.as_dict(), "frames": list(run)} for o, run in zip(objects, runs)],
        }
        return Example(fields, MediaFile("video", ".mp4", mp4_bytes(frames, self.fps, self.crf)))
