"""Resuming an interrupted evaluation from the items it already scored.

While a model is evaluated, every scored item (or item left out, with its reason) is appended as one
JSON line to ``<out>/partial/<model>/rank-<r>.jsonl`` and flushed, so a killed run loses at most the
batch in flight. A rerun into the same output folder reads every rank's lines (any number of ranks
may resume), skips those items and scores the rest; the finished outputs equal an uninterrupted
run's. ``<out>/partial/settings.json`` holds a digest of the run's settings: resuming with other
settings is refused (the lines would mix two evaluations). The folder is removed once every output
is written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from eval.results import ItemRecord
from mmgrpo.rollout.base import EncodesNothing
from mmgrpo.distributed import Ranks
from mmgrpo.skipped_rows import SkippedRow
from mmgrpo.types import Sample

logger = logging.getLogger(__name__)

PARTIAL_DIR = "partial"
SETTINGS_FILE = "settings.json"
Outcome = ItemRecord | SkippedRow
"""What evaluating one item gave: its scored record, or the row left out and why."""


def settings_digest(settings: Mapping[str, Any]) -> str:
    """A short hash of ``settings`` (plain JSON data): equal settings, equal digest."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def claim(out_dir: str | Path, settings: Mapping[str, Any], ranks: Ranks) -> Path:
    """The partial folder of ``out_dir`` for an evaluation under ``settings``, after checking that what
    it holds (if anything) was scored under the same settings; a ValueError names the keys that differ."""
    folder = Path(out_dir) / PARTIAL_DIR
    path = folder / SETTINGS_FILE
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved["digest"] != settings_digest(settings):
            changed = sorted(key for key in {*settings, *saved["settings"]}
                             if json.dumps(settings.get(key), sort_keys=True, default=str)
                             != json.dumps(saved["settings"].get(key), sort_keys=True, default=str))
            raise ValueError(
                f"{out_dir} holds an interrupted evaluation with other settings (changed: {', '.join(changed)}): "
                f"resume it with the same settings, write to another output folder, or delete {folder}"
            )
        logger.info("resuming the interrupted evaluation in %s", folder)
    ranks.barrier()  # every rank has read the settings before the main process writes them
    if ranks.is_main_process and not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"digest": settings_digest(settings), "settings": settings}, default=str))
    return folder


def finish(folder: Path, ranks: Ranks) -> None:
    """Remove the partial folder (every output is written: nothing is left to resume)."""
    ranks.barrier()
    if ranks.is_main_process:
        shutil.rmtree(folder, ignore_errors=True)


class Journal:
    """One model's scored items: read from every rank's file, appended (flushed) to this rank's."""

    def __init__(self, folder: Path, ranks: Ranks) -> None:
        self.path = folder / f"rank-{ranks.rank}.jsonl"
        self.scored: dict[tuple[str, int], tuple[str, Outcome]] = {}
        for path in sorted(folder.glob("rank-*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # the line being written when the run was killed
                    continue
                outcome = ItemRecord.from_dict(row["item"]) if "item" in row else SkippedRow(**row["skipped"])
                self.scored[(row["part"], row["index"])] = (row["id"], outcome)
        self.handle: IO[str] | None = None
        if self.scored:
            logger.info("%s: %d items already scored", folder.name, len(self.scored))
        ranks.barrier()  # every rank has read the files before any appends to them

    def holds_all(self, parts: Mapping[str, Sequence[Sample]]) -> bool:
        """Whether every item of every evaluation (name -> its samples) is scored already."""
        return all(len(self.part(name).done(samples)) == len(samples) for name, samples in parts.items())

    def part(self, name: str) -> PartJournal:
        """The journal of one evaluation (a dataset or a benchmark) of this model."""
        return PartJournal(self, name)

    def append(self, rows: Sequence[dict[str, Any]]) -> None:
        if self.handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.handle = self.path.open("a")
        for row in rows:
            self.handle.write(json.dumps(row, default=str) + "\n")
        self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


class AlreadyScored(EncodesNothing):
    """The rollout engine of a model whose every item a journal holds: it is never asked to generate."""

    def generate(self, samples: Sequence[Sample], params: Any, group_sizes: Any = None, **_: Any) -> list[Any]:
        raise RuntimeError(f"asked to generate {len(samples)} items, but every item was scored already")

    def before_update(self) -> None:
        """Never trained."""

    def update_weights(self, model_or_state_dict: Any) -> None:
        raise RuntimeError("a model whose every item was scored already has no weights loaded")


@dataclasses.dataclass
class PartJournal:
    """What one evaluation of a :class:`Journal` scored, by the index of the item in its list."""

    journal: Journal
    name: str

    def done(self, samples: Sequence[Sample]) -> dict[int, Outcome]:
        """Index -> outcome of the ``samples`` already scored; a ValueError where the journal names another item
        at an index (the data changed under the same settings)."""
        done = {}
        for (part, index), (item_id, outcome) in self.journal.scored.items():
            if part != self.name:
                continue
            if index >= len(samples) or samples[index].id != item_id:
                raise ValueError(f"{self.journal.path.parent}: item {index} of {self.name} was {item_id!r} when it "
                                 "was scored, the data now differ: evaluate into another output folder")
            done[index] = outcome
        return done

    def record(self, outcomes: Mapping[int, Outcome], samples: Sequence[Sample]) -> None:
        """Append ``outcomes`` (index -> outcome of ``samples[index]``), flushed."""
        self.journal.append([
            {"part": self.name, "index": index, "id": samples[index].id,
             ("item" if isinstance(outcome, ItemRecord) else "skipped"): dataclasses.asdict(outcome)}
            for index, outcome in outcomes.items()
        ])
