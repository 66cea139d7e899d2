"""Padded against packed (padding-free) training batches at long-tailed completion lengths (issue 34).

The update of one GRPO step on FIXED rollouts (no sampling: the forward and backward passes are what packing
changes): P prompts with one 448 x 448 image each, G completions per prompt whose lengths follow a long tail (most
short, ``--at-cap`` of them at the cap), one no-grad pass (the KL reference's log-probs), then the clipped policy
update (forward + backward + AdamW; mu = 1). Per setting, group-shared or plain x padded or packed (``train.padding_free``) x by
count or by token budget (``train.max_tokens_per_micro_batch``), in its own process: median seconds of ``--steps``
steps after a warm-up step (which allocates the optimizer state), and the peak RSS.
Rounds interleave the settings.

    python3 bench/packing.py --shape qwen2_5_vl_3b --prompts 2 --group-size 4 --lengths 64 512 --repeats 1
    python3 bench/packing.py --shape tiny --prompts 8 --group-size 8 --lengths 16 256
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.profiler import ProfilerActivity, profile
from step_setup import peak_rss_mib

from mmgrpo.config.schema import ModelConfig
from mmgrpo.inputs import media_budgets
from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.tiny import make_tiny
from mmgrpo.models.tiny.families import REAL_SHAPES
from mmgrpo.trainer.backends import OptimizerSpec
from mmgrpo.trainer.backends.single import SingleProcessBackend
from mmgrpo.trainer.update import LossSettings, StepBatch, UpdateSettings, batch_logprobs, build_loss_mask, policy_update
from mmgrpo.types import Completion, Sample

SETTINGS = {  # name -> (group-shared, padding-free, token budget per micro-batch or None)
    "shared-padded": (True, False, None),
    "shared-packed": (True, True, None),
    "plain-padded": (False, False, None),
    "plain-packed": (False, True, None),
    "shared-packed-budget": (True, True, "budget"),
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen2_5_vl_3b", choices=["tiny", *sorted(REAL_SHAPES)])
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (the shape's widths, fewer layers)")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs=2, default=(64, 512), metavar=("MIN", "CAP"))
    parser.add_argument("--at-cap", type=float, default=0.2, help="share of completions at the cap")
    parser.add_argument("--image-size", type=int, default=448)
    parser.add_argument("--micro-batch", type=int, default=0, help="completions per micro-batch; 0 = one group")
    parser.add_argument("--budget", type=int, default=0, help="token budget of the budget setting; 0 = 2 groups' mean")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--repeats", type=int, default=1, help="interleaved rounds")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per setting, after one warm-up")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="print the timed update's top operators (torch.profiler)")
    parser.add_argument("--run", help=argparse.SUPPRESS)  # internal: one setting in this process
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    return parser.parse_args()


def completion_lengths(args: argparse.Namespace) -> list[int]:
    """Long-tailed lengths in [MIN, CAP]: log-uniform, with ``--at-cap`` of them at the cap (seeded)."""
    rng = np.random.default_rng(0)
    low, cap = args.lengths
    total = args.prompts * args.group_size
    lengths = np.exp(rng.uniform(np.log(low), np.log(cap), total)).astype(int)
    lengths[rng.random(total) < args.at_cap] = cap
    return lengths.tolist()


def fixed_batch(processor, args: argparse.Namespace, family: str) -> StepBatch:
    rng = np.random.default_rng(1)
    samples = [
        Sample(id=f"p{i}", task="bench", messages=[{"role": "user", "content": [
            {"type": "image", "image": Image.fromarray(rng.integers(0, 256, (args.image_size,) * 2 + (3,), np.uint8))},
            {"type": "text", "text": "How many objects are there? Think step by step."},
        ]}])
        for i in range(args.prompts)
    ]
    prompts = build_prompt_batch(processor, samples, media_budgets(ModelConfig(), processor), family=family)
    completions = [rng.integers(0, 256, n).tolist() for n in completion_lengths(args)]  # byte tokens: never special
    mask = build_loss_mask([Completion("", ids) for ids in completions], [True] * len(completions), 0)
    return StepBatch(prompts=prompts, completions=completions, group_sizes=[args.group_size] * args.prompts,
                     advantages=torch.from_numpy(rng.standard_normal(len(completions))).float(), loss_mask=mask)


def run_setting(args: argparse.Namespace) -> dict[str, float]:
    """One setting in this process: seconds of a no-grad log-prob pass (the KL reference's) and of the update
(mu = 1: forward + backward + AdamW), and the peak RSS."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, processor = load_model_and_processor(args.model_dir, dtype="float32")
    shared, packed, budget = SETTINGS[args.run]
    batch = fixed_batch(processor, args, model.config.model_type)
    tokens = batch.group_tokens(shared)
    settings = UpdateSettings(
        micro_batch_size=args.micro_batch or args.group_size, group_shared_encoding=shared, padding_free=packed,
        max_tokens_per_micro_batch=(args.budget or 2 * int(np.mean(tokens))) if budget else None, with_entropy=True,
    )
    backend = SingleProcessBackend(model, OptimizerSpec(lr=1e-6, weight_decay=0.0, total_steps=args.steps + 1,
                                                          samples_per_step=len(batch.completions)))
    seconds: dict[str, list[float]] = {"logprobs_s": [], "update_s": []}
    for step in range(args.steps + 1):  # the first allocates the optimizer state: a warm-up, not timed
        start = time.perf_counter()
        reference, _ = batch_logprobs(model, backend, batch, settings, 1.0)  # as the KL reference's pass
        middle = time.perf_counter()
        model.train()
        with profile(activities=[ProfilerActivity.CPU]) if args.profile and step else nullcontext() as profiled:
            policy_update(backend, replace(batch, ref_logp=reference),
                          LossSettings(beta=0.04, max_len=args.lengths[1]), settings)
        if profiled is not None:
            print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=15), file=sys.stderr)
        if step:
            seconds["logprobs_s"].append(middle - start)
            seconds["update_s"].append(time.perf_counter() - middle)
    return {**{key: statistics.median(values) for key, values in seconds.items()}, "peak_rss_mib": peak_rss_mib(),
            "tokens": float(sum(tokens))}


def main() -> None:
    args = parse_args()
    if args.run:
        print(json.dumps(run_setting(args)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        shape = {} if args.shape == "tiny" else {**REAL_SHAPES[args.shape], "num_layers": args.layers}
        model_dir = make_tiny("qwen2_5_vl", Path(tmp) / "model", **shape)
        lengths = completion_lengths(args)
        print(f"shape {args.shape} ({args.layers} layers), P={args.prompts} x G={args.group_size}, completion lengths "
              f"{sorted(lengths)} (mean {statistics.mean(lengths):.0f}), {args.threads} threads")
        results: dict[str, list[dict[str, float]]] = {name: [] for name in args.settings}
        for _ in range(args.repeats):
            for name in args.settings:
                flags = [f"--{key.replace('_', '-')}={value}" for key, value in vars(args).items()
                         if key not in ("run", "model_dir", "settings", "lengths", "profile") and value is not None]
                flags += ["--profile"] if args.profile else []
                command = [sys.executable, __file__, *flags, "--lengths", *map(str, args.lengths),
                           "--run", name, "--model-dir", str(model_dir)]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode:
                    raise SystemExit(f"setting {name} failed:\n{done.stderr[-3000:]}")
                if args.profile:
                    print(f"{name}: the update's operators by self CPU time\n{done.stderr[done.stderr.find('---'):]}")
                results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
        print("| setting | reference log-probs (s) | update (s) | total (s) | peak RSS (MiB) |")
        print("| --- | --- | --- | --- | --- |")
        for name, rows in results.items():
            median = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
            total = median["logprobs_s"] + median["update_s"]
            print(f"| {name} | {median['logprobs_s']:.2f} | {median['update_s']:.2f} | {total:.2f} | "
                  f"{median['peak_rss_mib']:.0f} |")


if __name__ == "__main__":
    main()
