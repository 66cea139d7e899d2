"""One whole ``mmgrpo train`` of the embedded default in its own process, and what a benchmark reads from it.

Shared by the benchmarks that compare settings on whole runs (``async_rollout.py``, ``policy_losses.py``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path


def train_run(run_name: str, overrides: list[str], work: Path) -> dict[str, float]:
    """Run ``mmgrpo train`` with ``overrides`` under ``work``; return its GRPO seconds and steps/s, the median
    step split (``time/*``), the mean staleness and held-out accuracy before and after GRPO."""
    command = [
        sys.executable, "-m", "mmgrpo", "train", f"log.output_dir={work / 'runs'}", f"log.run_name={run_name}",
        "log.progress_bar=false", f"data.dir={work / 'data'}", *overrides,
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    folder = work / "runs" / run_name
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    median = {key: statistics.median(row[key] for row in rows) for key in ("time/rollout", "time/update", "time/step")}
    return {
        "grpo_s": summary["grpo_seconds"],
        "steps_per_s": summary["grpo_steps"] / summary["grpo_seconds"],
        **median,
        "staleness": statistics.mean(row.get("async/staleness_mean", 0.0) for row in rows),
        "before": summary["accuracy_before_grpo"],
        "after": summary["accuracy_after_grpo"],
    }
