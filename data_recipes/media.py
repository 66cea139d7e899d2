"""Resolve the media references of a canonical row to absolute paths (or bytes) and check them.

A dataset row may reference media as a relative or absolute path, a ``file://`` URI, raw
bytes, or a Hugging Face media dict ``{"bytes", "path"}``. Relative paths are looked up in
the given search folders in order (the dataset folder, then e.g. an image root). Embedded
bytes are written to ``bytes_dir`` (named by content hash, so reruns reuse them) or kept as
bytes. Any problem becomes a ``BadRow`` naming the file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from PIL import Image

from data_recipes.adapters.base import BadRow
from data_recipes.media_checks import CHECKS
from processors.errors import MediaError
from processors.sources import local_path

# canonical media column -> media kind
MEDIA_COLUMNS: dict[str, str] = {
    "image": "image",
    "images": "image",
    "video": "video",
    "videos": "video",
    "audio": "audio",
    "audios": "audio",
}


@dataclass(frozen=True)
class MediaResolver:
    """How to turn a row's media references into checked, loadable references."""

    search_dirs: tuple[Path, ...] = ()
    """Folders where relative paths are looked up, in order."""
    bytes_dir: Path | None = None
    """Where embedded bytes are written as files; None keeps them as bytes."""
    check: bool = True
    """Verify each file decodes (cheap header checks)."""

    def resolve_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """``row`` with every media column resolved and checked; raises ``BadRow``."""
        resolved = dict(row)
        for column, kind in MEDIA_COLUMNS.items():
            value = row.get(column)
            if value is None:
                continue
            if column != kind:  # a plural column ("images"): a list of references
                if not isinstance(value, (list, tuple)) or not value:
                    raise BadRow("missing media", f"column {column!r} needs a non-empty list, got {value!r}")
                resolved[column] = [self.resolve(ref, kind) for ref in value]
            else:
                resolved[column] = self.resolve(value, kind)
        return resolved

    def resolve(self, ref: Any, kind: str) -> Any:
        """One reference -> an absolute path string, bytes, or an in-memory PIL image."""
        if isinstance(ref, Image.Image):
            return ref
        if isinstance(ref, Mapping):  # a Hugging Face media dict: bytes win over path
            ref = ref.get("bytes") or ref.get("path")
        if isinstance(ref, (bytes, bytearray)):
            resolved = self._store(bytes(ref), kind)
        elif isinstance(ref, str) and ref:
            resolved = self._find(ref)
        else:
            raise BadRow("missing media", f"no usable {kind} reference: {ref!r}")
        if self.check:
            try:
                CHECKS[kind](resolved)
            except MediaError as error:
                raise BadRow(error.category, str(error)) from error
        return resolved

    def _find(self, ref: str) -> str:
        path = local_path(ref)
        if path.is_absolute():
            return str(path)
        candidates = [directory / path for directory in self.search_dirs]
        for candidate in candidates:
            if candidate.exists():
                return str(candidate.resolve())
        looked = ", ".join(map(str, self.search_dirs)) or "no search folders"
        raise BadRow("missing media", f"{ref} (looked in {looked})")

    def _store(self, data: bytes, kind: str) -> str | bytes:
        if self.bytes_dir is None:
            return data
        path = self.bytes_dir / f"{kind}-{hashlib.sha256(data).hexdigest()[:24]}"
        if not path.exists():
            self.bytes_dir.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return str(path)
