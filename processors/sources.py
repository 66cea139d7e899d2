"""Media references: resolve local files (plain paths or ``file://`` URIs), name sources, and
``VideoSpan``, a video reference cut to a time window.

Shared by the image, video and audio loaders so every error names its source the
same way and file checks (missing, not a file, zero bytes) happen in one place.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import numpy as np
from PIL import Image

from processors.errors import EmptyMediaError, MissingMediaError

PathRef = str | os.PathLike
_FRAGMENT = re.compile(r"^(?P<video>.+)#t=(?P<start>[0-9.]+),(?P<end>[0-9.]+)$")


@dataclass(frozen=True)
class VideoSpan:
    """The part of a video between ``start`` and ``end`` seconds, accepted wherever a video reference is.

    ``video`` is any video reference (a file, or a frame sequence played at the budget's ``fps``); the
    loader samples frames only inside the window. Printed as a media fragment: ``clip.mp4#t=3.0,7.5``.
    """

    video: Any
    start: float
    end: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.end) and 0 <= self.start <= self.end):
            raise ValueError(f"a video window needs 0 <= start <= end seconds, got {self.start}, {self.end}")

    @property
    def fragment(self) -> str:
        """The window as a media-fragment suffix, ``#t=<start>,<end>``."""
        return f"#t={float(self.start)},{float(self.end)}"

    def __str__(self) -> str:
        return f"{describe(self.video)}{self.fragment}"

    @classmethod
    def from_label(cls, label: str) -> VideoSpan | str:
        """A printed file window (``clip.mp4#t=3.0,7.5``) as a span again; any other label as it is."""
        match = _FRAGMENT.match(label)
        return cls(match["video"], float(match["start"]), float(match["end"])) if match else label


def local_path(ref: PathRef) -> Path:
    """The filesystem path of a plain path or a ``file://`` URI."""
    text = os.fspath(ref)
    if text.startswith("file://"):
        return Path(url2pathname(urlparse(text).path))
    return Path(text)


def existing_file(ref: PathRef) -> Path:
    """Resolve ``ref`` to a non-empty regular file, else raise the matching typed error."""
    path = local_path(ref)
    if not path.exists():
        raise MissingMediaError(path, "file does not exist")
    if not path.is_file():
        raise MissingMediaError(path, "not a regular file")
    if path.stat().st_size == 0:
        raise EmptyMediaError(path, "file is empty (0 bytes)")
    return path


def describe(ref: object) -> str:
    """A short human-readable name for a media reference, used in error messages."""
    if isinstance(ref, (str, os.PathLike)):
        return str(local_path(ref))
    if isinstance(ref, VideoSpan):
        return str(ref)
    if isinstance(ref, (bytes, bytearray)):
        return f"<{len(ref)} bytes>"
    if isinstance(ref, np.ndarray):
        return f"<array shape={ref.shape} dtype={ref.dtype}>"
    if isinstance(ref, Image.Image):
        return f"<PIL image {ref.mode} {ref.width}x{ref.height}>"
    if isinstance(ref, tuple) and len(ref) == 2 and isinstance(ref[1], (int, np.integer)):
        return f"<audio {describe(ref[0])} at {ref[1]} Hz>"  # an (array, sample_rate) pair
    if isinstance(ref, (list, tuple)):
        return f"<{len(ref)} frames, first {describe(ref[0])}>" if ref else "<no frames>"
    if isinstance(ref, dict):
        return describe(ref.get("path") or ref.get("bytes") or "<empty media dict>")
    return f"<{type(ref).__name__}>"
