"""Write generated examples as a dataset folder that ``datasets`` and ``load_rows`` read back.

Layout::

    DIR/train.jsonl, DIR/test.jsonl    one canonical row per line; media paths relative to DIR
    DIR/media/<id>.<ext>               the media files
    DIR/dataset_info.json              recipe, task, seed, options, row counts

Nothing time- or machine-dependent is written, so the same examples give identical bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from data_recipes.generators.base import Example

INFO_FILE = "dataset_info.json"
MEDIA_DIR = "media"
CANONICAL_FORMAT = "mmgrpo-canonical"  # marks our own layout, so loading needs no adapter guess


@dataclass(frozen=True)
class IdentifiedExample:
    """A generated example with its row id and split."""

    id: str
    split: str
    example: Example


def _row(out_dir: Path, item: IdentifiedExample) -> dict[str, Any]:
    """Write the example's media file, if any, and return its canonical row (media path relative to DIR)."""
    media = item.example.media
    if media is None:
        return {"id": item.id, **item.example.fields}
    relative = Path(MEDIA_DIR) / f"{item.id}{media.suffix}"
    (out_dir / relative).write_bytes(media.data)
    return {"id": item.id, **item.example.fields, media.column: relative.as_posix()}


def write_dataset(out_dir: str | Path, items: Iterable[IdentifiedExample], info: dict[str, Any]) -> dict[str, Any]:
    """Write rows (grouped by split, in order), media files and ``dataset_info.json``.

    ``info`` (recipe, task, seed, options ...) is stored with the format marker and the
    per-split row counts added; the completed info is returned.
    """
    out_dir = Path(out_dir)
    (out_dir / MEDIA_DIR).mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        rows.setdefault(item.split, []).append(_row(out_dir, item))
    for split, split_rows in rows.items():
        lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in split_rows)
        (out_dir / f"{split}.jsonl").write_text(lines, encoding="utf-8")
    full_info = {"format": CANONICAL_FORMAT, **info, "counts": {split: len(r) for split, r in rows.items()}}
    (out_dir / INFO_FILE).write_text(json.dumps(full_info, indent=2) + "\n", encoding="utf-8")
    return full_info


def read_info(directory: str | Path) -> dict[str, Any] | None:
    """The ``dataset_info.json`` of a dataset folder written by ``write_dataset``, or None."""
    path = Path(directory) / INFO_FILE
    if not path.is_file():
        return None
    info = json.loads(path.read_text(encoding="utf-8"))
    return info if isinstance(info, dict) and info.get("format") == CANONICAL_FORMAT else None
