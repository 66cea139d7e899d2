"""What each policy loss does on the embedded default: held-out accuracy before and after GRPO, and step time.

Each (loss, seed) is one whole ``mmgrpo train`` of the embedded default (cold-start SFT, eval before, GRPO,
eval after) in its own process, one after another so that runs never share the CPU. Same seeds, same GRPO steps
and every other setting at its default: only ``algo.policy_loss`` and the settings its paper gives change.

    python3 bench/policy_losses.py [--steps 600] [--seeds 0 1] [--only gspo] [extra overrides]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from train_runs import train_run

LOSSES = {  # name -> overrides (each paper's clip settings)
    "vanilla": [],
    "gspo": ["algo.policy_loss=gspo", "algo.eps_low=3e-4", "algo.eps_high=4e-4", "algo.loss_agg=seq-mean-token-mean"],
    "cispo": ["algo.policy_loss=cispo", "algo.eps_low=1", "algo.eps_high=0.28"],
    "sapo": ["algo.loss_type=sapo"],
    "geo_mean": ["algo.policy_loss=geo_mean", "algo.eps_low=0.4", "algo.eps_high=0.4",
                 "algo.loss_agg=seq-mean-token-mean"],
    "clip_cov": ["algo.policy_loss=clip_cov"],
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="GRPO steps of every run (the embedded default's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seed and data.seed of each run")
    parser.add_argument("--only", choices=sorted(LOSSES), action="append", help="run only these losses")
    parser.add_argument("--output", type=Path, help="where runs go (default: a temporary folder)")
    parser.add_argument("overrides", nargs="*", help="more config overrides for every run")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    chosen = args.only or list(LOSSES)
    work = args.output or Path(tempfile.mkdtemp(prefix="mmgrpo-loss-bench-"))
    rows = []
    for seed in args.seeds:
        common = [f"train.steps={args.steps}", f"seed={seed}", f"data.seed={seed}", *args.overrides]
        for name in chosen:
            rows.append((name, seed, train_run(f"{name}-seed{seed}", [*common, *LOSSES[name]], work)))
            print(f"{name} seed {seed}: {rows[-1][2]}", flush=True)
    print("| policy loss | seed | accuracy before -> after | median step s (rollout / update) | GRPO s |")
    print("|---|---|---|---|---|")
    for name, seed, r in rows:
        print(f"| {name} | {seed} | {100 * r['before']:.1f}% -> {100 * r['after']:.1f}% | {r['time/step']:.3f} "
              f"({r['time/rollout']:.3f} / {r['time/update']:.3f}) | {r['grpo_s']:.0f} |")
    for name in chosen:
        mine = [r for n, _, r in rows if n == name]
        print(f"{name}: accuracy {100 * statistics.mean(r['before'] for r in mine):.1f}% -> "
              f"{100 * statistics.mean(r['after'] for r in mine):.1f}%, median step "
              f"{statistics.mean(r['time/step'] for r in mine):.3f} s")


if __name__ == "__main__":
    main()
