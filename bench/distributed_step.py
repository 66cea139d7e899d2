"""GRPO step time and peak memory per rank: one process vs 2 ranks under ZeRO-2, ZeRO-3 and FSDP2.

Each setting is a whole ``mmgrpo train`` on the tiny Qwen2.5-VL (torchrun, gloo on CPU;
no SFT, no evaluation): the median of the step metrics after the warm-up steps, and
each rank's peak resident memory (``ru_maxrss``, so it includes loading the model and
the final checkpoint). The global batch is the same in every setting: P prompts x G
completions per step, split by rank.

    python3 bench/distributed_step.py [--prompts 8 --generations 8 --max-new-tokens 16 --steps 6 --warmup 2]

On a 2-core CPU two ranks share the cores: this measures overheads (collectives, gathering
sharded weights), not the speed-up more GPUs give.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = {  # name -> (ranks, overrides)
    "1 process": (1, ["train.backend=single"]),
    "2 ranks ZeRO-2": (2, ["train.backend=deepspeed", "train.zero_stage=2"]),
    "2 ranks ZeRO-3": (2, ["train.backend=deepspeed", "train.zero_stage=3"]),
    "2 ranks FSDP2": (2, ["train.backend=fsdp2"]),
}
RSS_MARK = "distributed_step.py rss_mb="


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8, help="P: prompts per step, all ranks together")
    parser.add_argument("--generations", type=int, default=8, help="G: completions per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--beta", type=float, default=0.04, help="KL weight (the reference is sharded like the policy)")
    parser.add_argument("--steps", type=int, default=6, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    parser.add_argument("--only", choices=sorted(SETTINGS), action="append", help="run only these settings")
    parser.add_argument("--rank-worker", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser.parse_args()


def train_overrides(args: argparse.Namespace, work: Path) -> list[str]:
    return [
        f"log.output_dir={work / 'runs'}", "log.progress_bar=false", "log.tensorboard=false",
        f"data.dir={work / 'data'}", "data.train.0.recipe_args.n=200", "sft.enabled=false",
        "eval.before=false", "eval.after=false", "checkpoint.every_n_steps=0",
        f"rollout.prompts_per_step={args.prompts}", f"rollout.num_generations={args.generations}",
        f"rollout.max_new_tokens={args.max_new_tokens}", f"algo.beta={args.beta}",
        f"train.steps={args.warmup + args.steps}", "train.lr_schedule=constant",
        f"train.micro_batch_size={args.generations}",
    ]


def run_setting(name: str, args: argparse.Namespace, work: Path) -> dict[str, float]:
    ranks, backend = SETTINGS[name]
    run_name = name.replace(" ", "-")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", __file__,
        "--rank-worker", *train_overrides(args, work), *backend, f"log.run_name={run_name}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(Path(tempfile.gettempdir()) / "mmgrpo-torch-extensions"))}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: torchrun failed ({done.returncode})\n{done.stderr[-4000:]}")
    rss = [float(value) for value in re.findall(re.escape(RSS_MARK) + r"(\d+)", done.stdout)]  # ranks' lines interleave
    rows = [json.loads(line) for line in (work / "runs" / run_name / "metrics.jsonl").read_text().splitlines()]
    timed = rows[args.warmup:]
    median = {key: statistics.median(row[key] for row in timed)
              for key in ("time/step", "time/rollout", "time/reference", "time/update", "tokens_per_second")}
    return {**median, "peak_rss_mb_max": max(rss), "peak_rss_mb_per_rank": rss}


def rank_worker(overrides: list[str]) -> int:
    from mmgrpo.cli import main

    code = main(["train", *overrides])
    print(f"{RSS_MARK}{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}", flush=True)
    return code


def main() -> None:
    args = parse_args()
    if args.rank_worker is not None:
        sys.exit(rank_worker(args.rank_worker))
    names = args.only or list(SETTINGS)
    print(f"P={args.prompts} G={args.generations} max_new_tokens={args.max_new_tokens} beta={args.beta} "
          f"steps={args.steps} (after {args.warmup} warm-up)")
    print(f"{'setting':<16} {'step s':>7} {'rollout':>8} {'ref':>6} {'update':>7} {'tok/s':>7}  peak RSS per rank (MB)")
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            result = run_setting(name, args, Path(folder))
            print(f"{name:<16} {result['time/step']:>7.2f} {result['time/rollout']:>8.2f} {result['time/reference']:>6.2f} "
                  f"{result['time/update']:>7.2f} {result['tokens_per_second']:>7.0f}  "
                  + ", ".join(f"{value:.0f}" for value in result["peak_rss_mb_per_rank"]), flush=True)


if __name__ == "__main__":
    main()
