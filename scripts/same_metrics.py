"""Whether two runs logged the same metrics, step by step, timings aside: the check that a refactor
changed nothing a user sees (issue: a 20-step run writes the same ``metrics.jsonl`` before and after).

    python scripts/same_metrics.py RUN_A RUN_B      # run folders or metrics.jsonl files

Exits 0 when every step has the same keys and values (times and rates excluded), else 1 after
naming each difference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TIMING_MARKS = ("time/", "seconds", "per_second")  # wall-clock readings differ run to run


def read_rows(path: Path) -> list[dict]:
    """The rows of ``path`` (a run folder's ``metrics.jsonl`` or the file itself), timings removed."""
    file = path / "metrics.jsonl" if path.is_dir() else path
    rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return [{key: value for key, value in row.items() if not any(mark in key for mark in TIMING_MARKS)} for row in rows]


def differences(first: list[dict], second: list[dict]) -> list[str]:
    """Each step's differing keys and values, in words (empty when the runs agree)."""
    found = [] if len(first) == len(second) else [f"{len(first)} rows vs {len(second)}"]
    for a, b in zip(first, second):
        for key in sorted(set(a) | set(b)):
            if a.get(key, "<absent>") != b.get(key, "<absent>"):
                found.append(f"step {a.get('step')}: {key}: {a.get(key, '<absent>')} vs {b.get(key, '<absent>')}")
    return found


def main(arguments: list[str]) -> int:
    first, second = (read_rows(Path(argument)) for argument in arguments)
    found = differences(first, second)
    print("\n".join(found) if found else f"same metrics: {len(first)} steps")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
