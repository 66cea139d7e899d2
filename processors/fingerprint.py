"""Content fingerprints of media references: the same media hash alike wherever they come from.

A file hashes by its bytes, not its path (a dataset copied elsewhere keeps its
fingerprints); in-memory media (encoded bytes, arrays, PIL images, audio pairs, frame
lists, ``datasets`` dicts) hash by their content; a ``VideoSpan`` by its video and its
window. A reference of a kind not listed, or a path that is not a readable file, has no
fingerprint: such media are never cached and the loader reports the error as usual.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from processors.sources import VideoSpan, local_path

FileDigest = Callable[[Path], str]
EXIF_ORIENTATION = 0x0112  # the loader turns images by this tag, so it is part of their content
READ_CHUNK = 1 << 20


def file_digest(path: Path) -> str:
    """Hex digest of the file's bytes."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as file:
        while chunk := file.read(READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class FileDigests:
    """``file_digest`` remembered per (path, size, modification time): a file is read once per process."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int], str] = {}

    def __call__(self, path: Path) -> str:
        stat = path.stat()
        identity = (str(path), stat.st_size, stat.st_mtime_ns)
        if identity not in self._known:
            self._known[identity] = file_digest(path)
        return self._known[identity]


def media_fingerprint(ref: Any, digest_file: FileDigest = file_digest) -> str | None:
    """Hex digest of the media ``ref`` names or holds; None when it cannot be hashed."""
    digest = hashlib.blake2b(digest_size=16)
    try:
        hashed = _feed(digest, ref, digest_file)
    except OSError:  # unreadable file: the loader names the error
        return None
    return digest.hexdigest() if hashed else None


def _feed(digest: Any, ref: Any, digest_file: FileDigest) -> bool:
    """Add ``ref``'s content to ``digest``, tagged by kind; False for a reference it cannot hash."""
    if isinstance(ref, (str, os.PathLike)):
        path = local_path(ref)
        if not path.is_file():
            return False
        digest.update(b"file:" + digest_file(path).encode())
        return True
    if isinstance(ref, VideoSpan):
        digest.update(f"span:{float(ref.start)!r}:{float(ref.end)!r}:".encode())
        return _feed(digest, ref.video, digest_file)
    if isinstance(ref, (bytes, bytearray, memoryview)):
        digest.update(b"bytes:")
        digest.update(ref)
        return True
    if isinstance(ref, torch.Tensor):
        ref = ref.detach().cpu().numpy()
    if isinstance(ref, np.ndarray):
        digest.update(f"array:{ref.shape}:{ref.dtype.str}:".encode())
        digest.update(np.ascontiguousarray(ref).data)
        return True
    if isinstance(ref, Image.Image):
        orientation = ref.getexif().get(EXIF_ORIENTATION)
        digest.update(f"pil:{ref.mode}:{ref.size}:{orientation}:".encode())
        digest.update(ref.tobytes())
        return True
    if isinstance(ref, (list, tuple)):
        digest.update(f"sequence:{type(ref).__name__}:{len(ref)}:".encode())
        return all(_feed_value(digest, item, digest_file) for item in ref)
    if isinstance(ref, dict):
        return _feed_media_dict(digest, ref, digest_file)
    return False


def _feed_value(digest: Any, value: Any, digest_file: FileDigest) -> bool:
    """Numbers and None inside sequences (an audio pair's sample rate) hash by value."""
    if value is None or isinstance(value, (bool, int, float, np.integer, np.floating)):
        digest.update(f"value:{value!r}:".encode())
        return True
    return _feed(digest, value, digest_file)


def _feed_media_dict(digest: Any, ref: dict[str, Any], digest_file: FileDigest) -> bool:
    """A ``datasets`` media dict hashes by what the loaders read from it: a decoded array with
    its sample rate, else the encoded bytes, else the file at ``path``."""
    if ref.get("array") is not None:
        digest.update(b"dict-array:")
        return _feed(digest, (ref["array"], ref.get("sampling_rate")), digest_file)
    if ref.get("bytes"):
        return _feed(digest, ref["bytes"], digest_file)
    if ref.get("path"):
        return _feed(digest, ref["path"], digest_file)
    return False
