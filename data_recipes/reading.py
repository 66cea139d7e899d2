"""Open one split of a dataset through Hugging Face ``datasets``, with media decoding turned off.

Accepted sources: a data file (jsonl/json/parquet/arrow/csv), a folder of such files (split
chosen by file or folder name, e.g. ``train.jsonl``, ``data/test-00000-of-00001.parquet``),
a ``save_to_disk`` folder, or a Hub id (when the network allows). Media columns stay undecoded
(``{"bytes", "path"}`` dicts) so a corrupt image becomes a skipped row later, not a crash here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import datasets

# file extension -> ``datasets`` packaged builder
BUILDERS: dict[str, str] = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}
# files ``save_to_disk`` / ``write_dataset`` put next to the data, never data themselves
METADATA_FILES = frozenset({"dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json"})
SPLIT_SEPARATORS = ("-", "_", ".")
COMMON_SPLITS = ("train", "test", "validation", "val", "dev", "eval")


def open_split(source: str, split: str) -> tuple[datasets.Dataset, Path | None]:
    """The ``split`` of ``source`` as an undecoded ``Dataset``, and the local folder it lives in (None for the Hub)."""
    path = Path(source).expanduser()
    if path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file()):
        return _saved_split(path, split), path
    if path.is_dir():
        return _load_files(_split_files(path, split), split), path
    if path.is_file():
        return _load_files([path], split), path.parent
    if path.is_absolute() or source.startswith((".", "~")) or source.count("/") != 1:
        raise FileNotFoundError(f"dataset {source!r} not found: not a local file or folder, nor a Hub id (owner/name)")
    return without_decoding(datasets.load_dataset(source, split=split)), None


def _saved_split(path: Path, split: str) -> datasets.Dataset:
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise ValueError(f"{path} has no split {split!r}; splits: {', '.join(loaded)}")
        loaded = loaded[split]
    return without_decoding(loaded)


def _data_files(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.rglob("*") if p.suffix in BUILDERS and p.name not in METADATA_FILES and p.is_file()
    )


def _is_split_file(path: Path, directory: Path, split: str) -> bool:
    """``train.jsonl``, ``train-0000.parquet``, ``data/train_x.arrow`` or ``train/part.parquet``."""
    stem = path.name[: -len(path.suffix)]
    named = stem == split or stem.startswith(tuple(split + sep for sep in SPLIT_SEPARATORS))
    return named or split in path.relative_to(directory).parts[:-1]


def _split_files(directory: Path, split: str) -> list[Path]:
    """Data files of ``split`` in ``directory``; if no file is named after a split, top-level files are "train"."""
    files = _data_files(directory)
    chosen = [p for p in files if _is_split_file(p, directory, split)]
    unnamed = not any(_is_split_file(p, directory, name) for p in files for name in COMMON_SPLITS)
    if not chosen and split == "train" and unnamed:
        chosen = [p for p in files if p.parent == directory]
    if not chosen:
        found = ", ".join(str(p.relative_to(directory)) for p in files[:10]) or "no data files"
        raise FileNotFoundError(f"no data files for split {split!r} in {directory} (found: {found})")
    return chosen


def _load_files(files: list[Path], split: str) -> datasets.Dataset:
    builders = {BUILDERS.get(p.suffix) for p in files}
    if len(builders) != 1 or None in builders:
        raise ValueError(f"cannot read {', '.join(map(str, files))} together: need one format of {', '.join(BUILDERS)}")
    try:
        loaded = datasets.load_dataset(builders.pop(), data_files={split: [str(p) for p in files]}, split=split)
    except Exception as error:  # datasets raises many types (Arrow, JSON, builder errors)
        raise ValueError(f"cannot read {', '.join(map(str, files))}: {error}") from error
    return without_decoding(loaded)


def _undecoded(feature: Any) -> Any:
    """``feature`` with decoding switched off in every Image/Audio/Video inside it."""
    if isinstance(feature, (datasets.Image, datasets.Audio, datasets.Video)):
        return dataclasses.replace(feature, decode=False)
    if isinstance(feature, dict):
        return {key: _undecoded(value) for key, value in feature.items()}
    if dataclasses.is_dataclass(feature) and hasattr(feature, "feature"):  # List / LargeList / Sequence
        return dataclasses.replace(feature, feature=_undecoded(feature.feature))
    return feature


def without_decoding(dataset: datasets.Dataset) -> datasets.Dataset:
    """``dataset`` whose media columns yield ``{"bytes", "path"}`` dicts instead of decoded objects."""
    for name, feature in dataset.features.items():
        undecoded = _undecoded(feature)
        if undecoded != feature:
            dataset = dataset.cast_column(name, undecoded)
    return dataset
