"""``load_rows``: read a dataset split into checked canonical rows, skipping and counting bad rows.

Every row goes through its adapter (public format -> canonical row) and the media resolver
(paths made absolute, embedded bytes stored, files checked to decode). A row that fails is
never a crash and never a silent drop: it is recorded as a ``SkippedRow`` with its id and
reason, and a one-line summary is logged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from data_recipes.adapters import ADAPTERS, Adapter, BadRow, detect_adapter
from data_recipes.media import MediaResolver
from data_recipes.reading import open_split
from data_recipes.writer import read_info
from mmgrpo.skipped_rows import SkippedRow

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetSpec:
    """Where a dataset is and how to read it."""

    path: str
    """A local file or folder (jsonl/json/parquet/arrow, or ``save_to_disk``), or a Hub id."""
    split: str = "train"
    adapter: str | None = None
    """Adapter name; None detects it from the columns (an error lists candidates when ambiguous)."""
    adapter_args: Mapping[str, Any] = field(default_factory=dict)
    """``{"columns": {field: column}}``: read a custom table's ``column`` as the canonical ``field``
    (``problem``, ``answer``, ``image``, ...); only mapped columns (and ``id``) are read."""
    limit: int | None = None
    """Stop after this many good rows."""
    media_root: str | None = None
    """Extra folder for relative media paths (e.g. VLM-R1's ``image_folders``), tried first."""
    media_cache: str | None = None
    """Folder where embedded media bytes are written; None keeps them in the rows as bytes."""
    check_media: bool = True
    """Check that every media file decodes (cheap header checks)."""


@dataclass
class LoadedRows:
    """Canonical rows of one split plus every row that was skipped and why."""

    rows: list[dict[str, Any]]
    skipped: list[SkippedRow] = field(default_factory=list)
    source: str = ""
    adapter: str = ""
    info: dict[str, Any] | None = None
    """``dataset_info.json`` of a generated dataset (recipe, task, seed), if any."""

    def summary(self) -> str:
        """One line: rows kept, rows skipped by reason, and the first skipped row."""
        line = f"{self.source}: {len(self.rows)} rows (adapter {self.adapter})"
        if not self.skipped:
            return line
        counts = Counter(skip.reason for skip in self.skipped).most_common()
        reasons = ", ".join(f"{count} {reason}" for reason, count in counts)
        first = self.skipped[0]
        return f"{line}; skipped {len(self.skipped)}: {reasons} (first: row {first.row_id!r}: {first.detail})"


def _choose_adapter(name: str | None, columns: Iterable[str], info: Mapping[str, Any] | None) -> Adapter:
    if name is not None:
        return ADAPTERS.get(name)
    return ADAPTERS.get("canonical") if info is not None else detect_adapter(columns)


def column_mapping(adapter_args: Mapping[str, Any], columns: Iterable[str]) -> dict[str, str]:
    """The ``columns`` mapping of ``adapter_args`` (field -> column), checked against the table's columns."""
    unknown = sorted(set(adapter_args) - {"columns"})
    if unknown:
        raise ValueError(f"adapter_args takes only 'columns' (field -> column), got {unknown}")
    mapping = {str(f): str(c) for f, c in dict(adapter_args.get("columns") or {}).items()}
    missing = sorted(set(mapping.values()) - set(columns))
    if missing:
        raise ValueError(f"adapter_args.columns names columns the table lacks: {missing}; its columns: {sorted(columns)}")
    return mapping


def _row_id(raw: Mapping[str, Any], index: int) -> str:
    return str(raw["id"]) if raw.get("id") is not None else str(index)


def load_rows(spec: DatasetSpec | str | Path, **options: Any) -> LoadedRows:
    """Load ``spec`` (a ``DatasetSpec``, or a path/Hub id plus ``DatasetSpec`` fields as options).

    Raises only for problems with the dataset as a whole (not found, unreadable, unknown or
    ambiguous adapter, no usable row); bad rows are skipped and counted.
    """
    spec = dataclasses.replace(spec, **options) if isinstance(spec, DatasetSpec) else DatasetSpec(str(spec), **options)
    dataset, directory = open_split(spec.path, spec.split)
    info = read_info(directory) if directory is not None else None
    mapping = column_mapping(spec.adapter_args, dataset.column_names)
    columns = [*mapping, *(["id"] if "id" in dataset.column_names else [])] if mapping else dataset.column_names
    adapter = _choose_adapter(spec.adapter, columns, info)
    search_dirs = tuple(Path(d) for d in (spec.media_root, directory) if d is not None)
    resolver = MediaResolver(search_dirs, Path(spec.media_cache) if spec.media_cache else None, spec.check_media)
    source = f"{spec.path} [{spec.split}]"
    loaded = LoadedRows([], source=source, adapter=adapter.name, info=info)
    for index, raw in enumerate(dataset):
        if spec.limit is not None and len(loaded.rows) >= spec.limit:
            break
        row_id = _row_id(raw, index)
        try:
            if mapping:
                raw = {**({"id": raw["id"]} if "id" in raw else {}), **{f: raw[c] for f, c in mapping.items()}}
            loaded.rows.append(resolver.resolve_row({**adapter.convert(raw), "id": row_id}))
        except BadRow as error:
            loaded.skipped.append(SkippedRow(row_id, source, error.reason, error.detail))
    if not loaded.rows:
        raise ValueError(f"no usable rows: {loaded.summary()}")
    logger.log(logging.WARNING if loaded.skipped else logging.INFO, "loaded %s", loaded.summary())
    return loaded
