"""Dataset mixtures: several datasets, each with a task and a weight, as one seeded sample stream.

A recipe (YAML file or dict)::

    seed: 0                      # optional, the default stream seed
    datasets:
      - path: data/clevr         # any ``DatasetSpec`` field: path, split, adapter, limit, media_root ...
        task: clevr_count        # optional for ``mmgrpo data make`` output (read from dataset_info.json)
        weight: 2.0              # relative sampling weight (default 1)
      - {path: data/geo.parquet, adapter: geometry3k, task: geometry}

Each draw picks a dataset with probability proportional to its weight, then that dataset's next
row in a shuffled order (reshuffled when used up), so every row is seen once per pass.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import yaml

from data_recipes.loading import DatasetSpec, LoadedRows, SkippedRow, load_rows

SPEC_KEYS = tuple(f.name for f in dataclasses.fields(DatasetSpec))


@dataclass(frozen=True)
class MixtureEntry:
    """One dataset of a mixture: where it is, which task reads it, and how often it is drawn."""

    data: DatasetSpec
    task: str | None = None
    weight: float = 1.0


def parse_entry(item: Mapping[str, Any]) -> MixtureEntry:
    """A ``datasets:`` item -> ``MixtureEntry``; unknown keys or a non-positive weight are errors."""
    options = dict(item)
    task, weight = options.pop("task", None), float(options.pop("weight", 1.0))
    unknown = sorted(set(options) - set(SPEC_KEYS))
    if unknown or "path" not in options:
        known = ", ".join(("task", "weight", *SPEC_KEYS))
        raise ValueError(f"mixture entry {dict(item)}: needs 'path'; unknown keys {unknown}; known: {known}")
    if weight <= 0:
        raise ValueError(f"mixture entry {options['path']!r}: weight must be > 0, got {weight}")
    return MixtureEntry(DatasetSpec(**options), task, weight)


def read_recipe(recipe: str | Path | Mapping[str, Any]) -> tuple[list[MixtureEntry], int]:
    """Entries and default seed of a mixture recipe given as a YAML path or an already-parsed dict."""
    config = recipe if isinstance(recipe, Mapping) else yaml.safe_load(Path(recipe).read_text(encoding="utf-8"))
    items = config.get("datasets") if isinstance(config, Mapping) else None
    if not items:
        raise ValueError(f"mixture recipe {recipe if not isinstance(recipe, Mapping) else ''} has no 'datasets' list")
    return [parse_entry(item) for item in items], int(config.get("seed", 0))


@dataclass
class Mixture:
    """Loaded datasets of a mixture with their tasks and normalised weights."""

    parts: list[LoadedRows]
    tasks: list[str]
    probabilities: np.ndarray  # [num_datasets], sums to 1
    seed: int = 0

    @property
    def skipped(self) -> list[SkippedRow]:
        return [row for part in self.parts for row in part.skipped]

    def stream(self, seed: int | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """Endless ``(task, row)`` draws; the same seed gives the same sequence."""
        rng = np.random.default_rng(self.seed if seed is None else seed)
        orders = [iter(()) for _ in self.parts]
        while True:
            index = int(rng.choice(len(self.parts), p=self.probabilities))
            position = next(orders[index], None)
            if position is None:  # this dataset's pass is done: reshuffle
                orders[index] = iter(rng.permutation(len(self.parts[index].rows)).tolist())
                position = next(orders[index])
            yield self.tasks[index], self.parts[index].rows[position]

    def sample(self, n: int, seed: int | None = None) -> list[tuple[str, dict[str, Any]]]:
        """The first ``n`` draws of ``stream(seed)``."""
        return list(itertools.islice(self.stream(seed), n))


def _task_of(entry: MixtureEntry, loaded: LoadedRows) -> str:
    task = entry.task or (loaded.info or {}).get("task")
    if not task:
        raise ValueError(f"mixture entry {entry.data.path!r} needs a 'task' (it has no dataset_info.json naming one)")
    return str(task)


def load_mixture(recipe: str | Path | Mapping[str, Any]) -> Mixture:
    """Load every dataset of a mixture recipe (bad rows skipped and counted per dataset)."""
    entries, seed = read_recipe(recipe)
    parts = [load_rows(entry.data) for entry in entries]
    weights = np.array([entry.weight for entry in entries], dtype=float)
    tasks = [_task_of(entry, part) for entry, part in zip(entries, parts)]
    return Mixture(parts, tasks, weights / weights.sum(), seed)
