"""What each policy loss does on the embedded default: held-out accuracy before and after GRPO, and step time.

Each (loss, seed) is one whole ``mmgrpo train`` of the embedded default (cold-start SFT, eval before, GRPO,
eval after) in its own process, one after another so that runs never share the CPU. Same seeds, same GRPO steps
and every other setting at its default: only ``algo.policy_loss`` and the settings its paper gives change.

    python3 bench/policy_losses.py [--steps 600] [--seeds 0 1] [--only gspo] [extra overrides]
"""

from __future__ import annotations

import statistics

from train_runs import parse_settings_args, run_settings

LOSSES = {  # name -> overrides (each paper's clip settings)
    "vanilla": [],
    "gspo": ["algo.policy_loss=gspo", "algo.eps_low=3e-4", "algo.eps_high=4e-4", "algo.loss_agg=seq-mean-token-mean"],
    "cispo": ["algo.policy_loss=cispo", "algo.eps_low=1", "algo.eps_high=0.28"],
    "sapo": ["algo.loss_type=sapo"],
    "geo_mean": ["algo.policy_loss=geo_mean", "algo.eps_low=0.4", "algo.eps_high=0.4",
                 "algo.loss_agg=seq-mean-token-mean"],
    "clip_cov": ["algo.policy_loss=clip_cov"],
}


def main() -> None:
    args = parse_settings_args(__doc__.splitlines()[0], LOSSES, seeds=[0, 1])
    chosen = args.only or list(LOSSES)
    rows = run_settings(args, LOSSES, prefix="mmgrpo-loss-bench-")
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
