"""Media references: resolve local files (plain paths or ``file://`` URIs) and name sources.

Shared by the image, video and audio loaders so every error names its source the
same way and file checks (missing, not a file, zero bytes) happen in one place.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import numpy as np
from PIL import Image

from processors.errors import EmptyMediaError, MissingMediaError

PathRef = str | os.PathLike


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
