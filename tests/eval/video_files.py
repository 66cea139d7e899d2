"""Tiny video clips for benchmark fixtures (a few solid-colour frames as H.264 mp4)."""

from __future__ import annotations

from PIL import Image

from data_recipes.generators.video_count import mp4_bytes


def clip(seed: int, frames: int = 4, size: tuple[int, int] = (32, 32), fps: int = 2) -> bytes:
    """A short mp4 whose frames change colour with ``seed`` and the frame number."""
    images = [Image.new("RGB", size, ((60 * seed + 30 * frame) % 256, 120, 200)) for frame in range(frames)]
    return mp4_bytes(images, fps=fps, crf=23)
