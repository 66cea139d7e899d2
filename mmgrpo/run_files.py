"""The files a run folder holds that both the trainer (writing) and the reports (reading) name.

Per-step logs are JSON lines, each row with the ``step`` it belongs to; :func:`read_metrics` reads any of them,
tolerating the torn last line a killed writer leaves.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
COMPLETIONS_FILE = "completions.jsonl"
REWARD_ERRORS_FILE = "reward_errors.jsonl"  # written by mmgrpo.trainer.reward_errors
STEP_FILES = (METRICS_FILE, COMPLETIONS_FILE, REWARD_ERRORS_FILE)  # JSON lines, each with the "step" it belongs to


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All rows of a JSON-lines file such as ``metrics.jsonl``.

    A torn last line (the process died while writing it) is dropped with a warning; a bad
    line elsewhere is an error naming the file and line.
    """
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    last = max((number for number, line in enumerate(lines) if line.strip()), default=-1)
    rows = []
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number != last:
                raise ValueError(f"{path}, line {number + 1}: not a JSON row ({error.msg})") from None
            logger.warning("%s: dropping its torn last line %d (the writer was cut off)", path, number + 1)
    return rows
