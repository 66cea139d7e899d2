"""Media drawn small for a report: images and a video's frames as inlined JPEGs, audio as a waveform.

Each returns an HTML fragment that needs nothing outside the page, or None when the media
cannot be read any more (moved, deleted, held only in memory during the run).
"""

from __future__ import annotations

import base64
import html
import io
from functools import lru_cache

import numpy as np
from PIL import Image

THUMBNAIL_SIDE = 160  # pixels, the longer side
VIDEO_FRAMES_SHOWN = 4
WAVEFORM_POINTS = 160


@lru_cache(maxsize=512)
def thumbnail(kind: str, ref: str) -> str | None:
    """``<img>`` or ``<svg>`` markup of the media ``ref`` of modality ``kind``; None if unreadable."""
    from processors import MediaError

    try:
        if kind == "image":
            return _image_tag([_load_image(ref)], ref)
        if kind == "video":
            return _image_tag(_video_frames(ref), ref)
        if kind == "audio":
            return _waveform(ref)
    except (MediaError, OSError, ValueError):
        return None
    return None


def _load_image(ref: str) -> Image.Image:
    from processors.image import decode_image, to_rgb

    return to_rgb(decode_image(ref, ref))


def _video_frames(ref: str) -> list[Image.Image]:
    from processors import VideoBudget, load_video

    clip = load_video(ref, VideoBudget(nframes=VIDEO_FRAMES_SHOWN))
    return [Image.fromarray(frame) for frame in clip.frames[:VIDEO_FRAMES_SHOWN]]


def _image_tag(frames: list[Image.Image], ref: str) -> str:
    """The frames side by side, each at most THUMBNAIL_SIDE, as one inlined JPEG."""
    small = []
    for frame in frames:
        frame = frame.copy()
        frame.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
        small.append(frame)
    strip = Image.new("RGB", (sum(f.width for f in small), max(f.height for f in small)), "white")
    left = 0
    for frame in small:
        strip.paste(frame, (left, 0))
        left += frame.width
    buffer = io.BytesIO()
    strip.save(buffer, format="JPEG", quality=85)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img class="media" alt="{html.escape(ref)}" title="{html.escape(ref)}" src="data:image/jpeg;base64,{data}">'


def _waveform(ref: str) -> str:
    """The clip's peak envelope as an SVG polygon (min and max of each of WAVEFORM_POINTS slices)."""
    from processors import load_audio

    samples = load_audio(ref).samples
    chunks = np.array_split(samples, WAVEFORM_POINTS) if len(samples) >= WAVEFORM_POINTS else [samples]
    peaks = [(float(c.max()), float(c.min())) if len(c) else (0.0, 0.0) for c in chunks]
    scale = max(1e-6, max(max(abs(a), abs(b)) for a, b in peaks))
    height = 40
    top = [f"{i},{height / 2 - a / scale * height / 2:.1f}" for i, (a, _) in enumerate(peaks)]
    bottom = [f"{i},{height / 2 - b / scale * height / 2:.1f}" for i, (_, b) in reversed(list(enumerate(peaks)))]
    return (f'<svg class="media" viewBox="0 0 {len(peaks)} {height}" width="{THUMBNAIL_SIDE}" height="{height}" '
            f'role="img"><title>{html.escape(ref)}</title><polygon points="{" ".join(top + bottom)}" '
            'fill="#4c72b0"/></svg>')
