"""Whole ``mmgrpo train`` runs of the embedded default, each in its own process, and what a benchmark reads from
them. Shared by the benchmarks that compare settings on whole runs (``async_rollout.py``, ``policy_losses.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

Row = tuple[str, int, dict[str, float]]  # (setting, seed, what train_run read)


def parse_settings_args(description: str, settings: dict[str, list[str]], seeds: list[int]) -> argparse.Namespace:
    """``--steps``, ``--seeds``, ``--only`` (a setting's name), ``--output`` and extra overrides for every run."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=600, help="GRPO steps of every run (the embedded default's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=seeds, help="seed and data.seed of each run")
    parser.add_argument("--only", choices=sorted(settings), action="append", help="run only these settings")
    parser.add_argument("--output", type=Path, help="where runs go (default: a temporary folder)")
    parser.add_argument("overrides", nargs="*", help="more config overrides for every run")
    return parser.parse_args()


def run_settings(args: argparse.Namespace, settings: dict[str, list[str]], prefix: str) -> list[Row]:
    """Every chosen setting once per seed, one run after another (runs never share the CPU), in seed order."""
    work = args.output or Path(tempfile.mkdtemp(prefix=prefix))
    rows = []
    for seed in args.seeds:
        common = [f"train.steps={args.steps}", f"seed={seed}", f"data.seed={seed}", *args.overrides]
        for name in args.only or list(settings):
            run_name = name.replace(", ", "-").replace(" ", "_") + f"-seed{seed}"
            rows.append((name, seed, train_run(run_name, [*common, *settings[name]], work)))
            print(f"{name} seed {seed}: {rows[-1][2]}", flush=True)
    return rows


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
