"""Reading a benchmark's published files: Hub parquet (images as bytes) or json + a media folder.

``records`` yields the raw rows of one split: a ``.json`` file holding an object keyed by id
(MathVista's ``testmini.json``) is read as its values; anything else goes through
:func:`data_recipes.reading.open_split` (parquet/jsonl/json lists, a folder of shards found by
split name, media columns left undecoded). ``images`` resolves a row's image references
(bytes or paths relative to the files' folder) through the data layer's checks; ``video`` finds and
checks a video file named by a row (Video-MME, MVBench keep videos beside their annotation files).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from data_recipes.adapters.base import BadRow
from data_recipes.media import MediaResolver
from data_recipes.reading import open_split


def records(path: str, split: str) -> tuple[Iterator[Mapping[str, Any]], Path | None]:
    """The rows of ``split`` under ``path`` and the folder relative media paths start from."""
    source = Path(path).expanduser()
    if source.suffix == ".json" and source.is_file():
        data = json.loads(source.read_text())
        if isinstance(data, dict):
            return iter(data.values()), source.parent
    dataset, folder = open_split(path, split)
    return iter(dataset), folder


def images(
    raw: Mapping[str, Any], columns: Sequence[str], folder: Path | None, *, item_id: str, file_label: str
) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """Resolved images of ``columns`` (in order, empty ones left out) and a printable reference for each:
    the path, or ``<file>#<id>/<column>`` for embedded bytes. A missing or corrupt image raises ``BadRow``."""
    resolver = MediaResolver(search_dirs=(folder,) if folder is not None else ())
    resolved, refs = [], []
    for column in columns:
        value = raw.get(column)
        if value is None or (isinstance(value, Mapping) and not (value.get("bytes") or value.get("path"))):
            continue
        reference = resolver.resolve(value, "image")
        resolved.append(reference)
        refs.append(reference if isinstance(reference, str) else f"{file_label}#{item_id}/{column}")
    if not resolved:
        raise BadRow("missing media", f"no image in {', '.join(columns)}")
    return tuple(resolved), tuple(refs)


def video(folder: Path, name: str, suffixes: Sequence[str] = ("",)) -> str:
    """The video ``folder/<name><suffix>`` for the first suffix that exists, checked to decode (its header and
    first frame); a missing or corrupt file raises ``BadRow`` naming it."""
    candidates = [folder / f"{name}{suffix}" for suffix in suffixes]
    found = next((path for path in candidates if path.is_file()), None)
    if found is None:
        raise BadRow("missing media", f"no video {' or '.join(str(path) for path in candidates)}")
    return MediaResolver().resolve(str(found), "video")
