"""Sync vs async rollout on the embedded default: GRPO steps per second and held-out accuracy.

Each setting is one whole ``mmgrpo train`` of the embedded default (cold-start SFT, eval
before, GRPO, eval after) in its own process, run one after another so that they never
share the CPU. Reported per setting: GRPO wall time and steps/s (``summary.json``'s
``grpo_seconds`` over ``grpo_steps``), the median step split (the step's ``time/*`` metrics:
in async mode ``time/rollout`` is the trainer's wait for the worker), the mean staleness,
and held-out accuracy before and after GRPO. Same seed, same number of GRPO steps (so the
same number of samples) in every setting.

    python3 bench/async_rollout.py [--steps 600] [--seeds 0 1 2] [--only "sync, 1 thread"] [extra overrides]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from train_runs import train_run

SETTINGS = {  # name -> overrides
    "sync, 1 thread": ["rollout.mode=sync", "train.num_threads=1"],
    "sync, 2 threads": ["rollout.mode=sync", "train.num_threads=2"],
    "async, staleness 1, TIS": [
        "rollout.mode=async", "rollout.max_staleness=1", "algo.is_correction=tis",
        "train.num_threads=1", "rollout.worker_threads=1",
    ],
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="GRPO steps (the embedded default's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seed and data.seed of each run")
    parser.add_argument("--only", choices=sorted(SETTINGS), action="append", help="run only these settings")
    parser.add_argument("--output", type=Path, help="where runs go (default: a temporary folder)")
    parser.add_argument("overrides", nargs="*", help="more config overrides for every setting")
    return parser.parse_args()


def run(name: str, overrides: list[str], work: Path) -> dict[str, float]:
    run_name = name.replace(", ", "-").replace(" ", "_") + "-" + overrides[1].replace("=", "")
    return train_run(run_name, overrides, work)


def main() -> None:
    args = parse_args()
    chosen = args.only or list(SETTINGS)
    work = args.output or Path(tempfile.mkdtemp(prefix="mmgrpo-async-bench-"))
    rows = []
    for seed in args.seeds:
        common = [f"train.steps={args.steps}", f"seed={seed}", f"data.seed={seed}", *args.overrides]
        rows += [(name, seed, run(name, [*common, *SETTINGS[name]], work)) for name in chosen]
    base = statistics.mean(r["steps_per_s"] for name, _, r in rows if name == chosen[0])
    print(f"| setting | seed | GRPO s | steps/s | vs {chosen[0]} | median step s (rollout wait / update) | staleness | "
          "accuracy before -> after |")
    print("|---|---|---|---|---|---|---|---|")
    for name, seed, r in rows:
        print(f"| {name} | {seed} | {r['grpo_s']:.0f} | {r['steps_per_s']:.2f} | {r['steps_per_s'] / base:.2f}x | "
              f"{r['time/step']:.3f} ({r['time/rollout']:.3f} / {r['time/update']:.3f}) | {r['staleness']:.2f} | "
              f"{100 * r['before']:.1f}% -> {100 * r['after']:.1f}% |")
    for name in chosen:
        mine = [r for n, _, r in rows if n == name]
        print(f"{name}: mean {statistics.mean(r['steps_per_s'] for r in mine):.2f} steps/s, median step "
              f"{statistics.mean(r['time/step'] for r in mine):.3f} s, accuracy after "
              f"{100 * statistics.mean(r['after'] for r in mine):.1f}%")


if __name__ == "__main__":
    main()
