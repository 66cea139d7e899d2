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

import statistics

from train_runs import parse_settings_args, run_settings

SETTINGS = {  # name -> overrides
    "sync, 1 thread": ["rollout.mode=sync", "train.num_threads=1"],
    "sync, 2 threads": ["rollout.mode=sync", "train.num_threads=2"],
    "async, staleness 1, TIS": [
        "rollout.mode=async", "rollout.max_staleness=1", "algo.is_correction=tis",
        "train.num_threads=1", "rollout.worker_threads=1",
    ],
}


def main() -> None:
    args = parse_settings_args(__doc__.splitlines()[0], SETTINGS, seeds=[0])
    chosen = args.only or list(SETTINGS)
    rows = run_settings(args, SETTINGS, prefix="mmgrpo-async-bench-")
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
