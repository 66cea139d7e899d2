"""The media of evaluated items, for a report's thumbnails: a path as it is; an image a benchmark's
parquet embeds (referenced as ``<files>#<id>/<column>``) read back from the benchmark's files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any


def embedded_parts(ref: str) -> tuple[str, str, str] | None:
    """(benchmark files, item id, column) of an embedded image's reference; None for anything else."""
    head, slash, column = ref.rpartition("/")
    path, hash_, item_id = head.partition("#")
    if not (slash and hash_ and path and item_id and column):
        return None
    return path, item_id, column


class MediaSources:
    """What to draw for each media reference of a benchmark's items: the file itself, or the bytes the
    benchmark's files embed. ``benchmarks`` (``BenchmarkConfig`` dicts, as results.json's config holds
    them) give the split each benchmark was read from; otherwise its own split is assumed."""

    def __init__(self, benchmarks: Sequence[Mapping[str, Any]] = ()) -> None:
        self.splits = {(spec["name"], str(spec["path"])): spec.get("split") for spec in benchmarks}

    def source(self, task: str, ref: str) -> str | bytes | None:
        """The path or bytes behind ``ref`` of an item of ``task``; None when neither can be found."""
        if Path(ref).is_file():
            return ref
        parts = embedded_parts(ref)
        if parts is None:
            return None
        path, _, _ = parts
        return _benchmark_images(task, path, self.splits.get((task, path))).get(ref)


@cache
def _benchmark_images(name: str, path: str, split: str | None) -> dict[str, Any]:
    """Media reference -> image (bytes or path) of every item benchmark ``name`` reads from ``path``; {} when
    ``name`` is no registered benchmark or its files are gone."""
    from eval.benchmarks import BENCHMARKS

    if name not in BENCHMARKS or not Path(path).expanduser().exists():
        return {}
    benchmark = BENCHMARKS.get(name)
    items, _ = benchmark.read(path, split or benchmark.split)
    return {ref: image for item in items for ref, image in zip(item.media_refs, item.images)}
