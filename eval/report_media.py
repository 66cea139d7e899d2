"""The media of evaluated items, for a report's thumbnails: a path as it is; an image a benchmark's
parquet embeds (referenced as ``<files>#<id>/<column>``) read back from the benchmark's files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
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
    """What to draw for media references of a benchmark's items: the file itself, or the bytes the
    benchmark's files embed. ``benchmarks`` (``BenchmarkConfig`` dicts, as results.json's config holds
    them) give the split each benchmark was read from; otherwise its own split is assumed."""

    def __init__(self, benchmarks: Sequence[Mapping[str, Any]] = ()) -> None:
        self.splits = {(spec["name"], str(spec["path"])): spec.get("split") for spec in benchmarks}

    def sources(self, task: str, refs: Iterable[str]) -> dict[str, str | bytes]:
        """The path or bytes behind each of ``refs`` (media of items of ``task``) that can be found; the
        benchmark's files are read once per folder for all the embedded ones."""
        found: dict[str, str | bytes] = {}
        embedded: dict[str, set[str]] = {}
        for ref in refs:
            parts = embedded_parts(ref)
            if Path(ref).is_file():
                found[ref] = ref
            elif parts is not None:
                embedded.setdefault(parts[0], set()).add(ref)
        for path, wanted in embedded.items():
            found |= _embedded_images(task, path, self.splits.get((task, path)), frozenset(wanted))
        return found


@lru_cache(maxsize=16)  # the per-model reports and the combined one show the same items
def _embedded_images(name: str, path: str, split: str | None, wanted: frozenset[str]) -> dict[str, Any]:
    """The images (bytes or paths) behind the ``wanted`` references of benchmark ``name``'s items in ``path``;
    {} when ``name`` is no registered benchmark or its files are gone."""
    from eval.benchmarks import BENCHMARKS

    if name not in BENCHMARKS or not Path(path).expanduser().exists():
        return {}
    benchmark = BENCHMARKS.get(name)
    items, _ = benchmark.read(path, split or benchmark.split)
    return {ref: image for item in items for ref, image in zip(item.media_refs, item.images) if ref in wanted}
