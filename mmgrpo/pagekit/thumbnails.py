"""Media drawn small for a report: images and a video's frames as inlined JPEGs, audio as a waveform.

Each returns an HTML fragment that needs nothing outside the page, or None when the media
cannot be read any more (moved, deleted, held only in memory during the run). An image may
also be given as its encoded bytes (a benchmark's parquet embeds them).
"""

from __future__ import annotations

import base64
import html
import io
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

THUMBNAIL_SIDE = 160  # pixels, the longer side
VIDEO_FRAMES_SHOWN = 4
WAVEFORM_POINTS = 160
AUDIO_SUFFIXES = {".wav", ".flac", ".mp3", ".ogg"}
VIDEO_SUFFIXES = {".mp4", ".avi", ".webm", ".mkv"}


def media_kind(ref: str) -> str:
    """The modality of a media path (a video's may end in a window, ``#t=<start>,<end>``), by its suffix
    (image unless audio or video)."""
    from processors import VideoSpan

    span = VideoSpan.from_label(ref)
    suffix = Path(span.video if isinstance(span, VideoSpan) else ref).suffix.lower()
    return "audio" if suffix in AUDIO_SUFFIXES else "video" if suffix in VIDEO_SUFFIXES else "image"


def media_markup(ref: str, kind: str | None = None, source: str | bytes | None = None) -> str:
    """The thumbnail of ``source`` (default: the path ``ref``), or a note naming ``ref`` when it cannot be read."""
    kind = kind or media_kind(ref)
    markup = thumbnail(kind, ref if source is None else source, ref)
    return markup if markup is not None else f'<span class="muted">[{kind} unavailable: {html.escape(ref)}]</span>'


@lru_cache(maxsize=512)
def thumbnail(kind: str, ref: str | bytes, label: str | None = None) -> str | None:
    """``<img>`` or ``<svg>`` markup of the media ``ref`` (a path; an image also as encoded bytes) of modality
    ``kind``, titled ``label`` (default: the path); None if unreadable."""
    from processors import MediaError

    label = label if label is not None else str(ref)
    try:
        if kind == "image":
            return _image_tag([_load_image(ref, label)], label)
        if kind == "video":
            return _image_tag(_video_frames(ref), label)
        if kind == "audio":
            return _waveform(ref)
    except (MediaError, OSError, ValueError):
        return None
    return None


def _load_image(ref: str | bytes, label: str) -> Image.Image:
    from processors.image import decode_image, to_rgb

    return to_rgb(decode_image(ref, label))


def _video_frames(ref: str) -> list[Image.Image]:
    """Frames of the video at ``ref``, inside its window when the label names one."""
    from processors import VideoBudget, VideoSpan, load_video

    clip = load_video(VideoSpan.from_label(ref), VideoBudget(nframes=VIDEO_FRAMES_SHOWN))
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
    return image_markup(jpeg_data_uri(strip), ref)


def jpeg_data_uri(image: Image.Image, side: int | None = None) -> str:
    """``image`` as an inlined JPEG (``data:`` URI), first shrunk to at most ``side`` pixels a side when given."""
    if side is not None:
        image = image.copy()
        image.thumbnail((side, side))
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=85)
    return f"data:image/jpeg;base64,{base64.b64encode(buffer.getvalue()).decode('ascii')}"


def image_markup(source: str, label: str) -> str:
    """An ``<img>`` of ``source`` (a URI) titled ``label``."""
    return f'<img class="media" alt="{html.escape(label)}" title="{html.escape(label)}" src="{html.escape(source)}">'


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
