"""Rows left out of a run, and the one ledger that records them in ``skipped_rows.jsonl``.

A row can be left out when its split is loaded (bad field, missing or corrupt media) or
later, when the batch builder cannot turn it into model inputs (media that fail to decode
or resize, a prompt longer than ``data.max_prompt_tokens``). Every such row becomes a
:class:`SkippedRow`; the :class:`SkipLedger` of a run appends each one once, with its
split and the stage that found it, so the run folder names every bad row and the summary
and report count them from one place.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

LEDGER_FILE = "skipped_rows.jsonl"


@dataclass(frozen=True)
class SkippedRow:
    """A row left out, with the reason category (e.g. "corrupt media") and the specifics."""

    row_id: str
    source: str  # the dataset (load time) or the media file / task that failed (batch time)
    reason: str
    detail: str = ""
    split: str = ""  # "train" or "test" once recorded in a ledger
    stage: str = ""  # what found it: "load", "sft", "grpo", "eval"

    @property
    def key(self) -> tuple[str, str, str]:
        """Identity in a ledger: one record per row, split and reason, whichever stage saw it again."""
        return self.split, self.row_id, self.reason


class SkipLedger:
    """Every skipped row of a run, appended to ``path`` as JSON lines when first seen.

    Reopening the file of an earlier (resumed) run keeps its records and does not write
    them again; a torn last line (power loss) is dropped. ``path`` None keeps the records
    in memory only.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.records: list[SkippedRow] = read_ledger(path) if path is not None else []
        if path is not None:
            _drop_torn_tail(path)
        self._keys = {record.key for record in self.records}

    def add(self, rows: Iterable[SkippedRow], *, split: str, stage: str) -> list[SkippedRow]:
        """Record ``rows`` as skipped from ``split`` by ``stage``; returns those not recorded before."""
        new = []
        for row in rows:
            record = dataclasses.replace(row, split=split, stage=row.stage or stage)
            if record.key not in self._keys:
                self._keys.add(record.key)
                new.append(record)
        self.records.extend(new)
        if new and self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.writelines(json.dumps(dataclasses.asdict(record)) + "\n" for record in new)
        return new

    def ids(self, split: str) -> set[str]:
        """Ids of the rows of ``split`` skipped so far."""
        return {record.row_id for record in self.records if record.split == split}

    def counts(self) -> dict[str, int]:
        """Skipped rows per ``"<split>/<reason>"``, most frequent first."""
        counter = Counter(f"{record.split}/{record.reason}" for record in self.records)
        return dict(counter.most_common())


def read_ledger(path: Path) -> list[SkippedRow]:
    """The records of a ledger file (none when it does not exist); a torn last line is ignored."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(SkippedRow(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            logger.warning("%s: ignoring an unreadable line: %.80s", path, line)
    return records


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line that has no newline, so appended records start on a line of their own."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        path.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")


def describe_skipped(rows: Iterable[SkippedRow], limit: int = 5) -> str:
    """A one-line list naming skipped rows and why, e.g. for a warning."""
    rows = list(rows)
    named = "; ".join(f"{row.row_id!r} ({row.reason}: {row.detail or row.source})" for row in rows[:limit])
    more = f"; and {len(rows) - limit} more" if len(rows) > limit else ""
    return named + more
