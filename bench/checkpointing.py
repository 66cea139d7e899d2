"""Gradient checkpointing x group-shared encoding: GRPO step time and peak RSS of each of the four settings.

Not a test: numbers depend on the machine and its load. Runs ``bench/grpo_step.py`` per
setting, each in its own process (so its peak RSS is its own), rounds interleaved, on the
tiny Qwen2.5-VL with large images (``--image-size``: the prompt's image tokens dominate,
as at 7B with real images), one micro-batch of the whole P x G batch, completions forced
to full length; prints the median step, its update phase and the peak RSS of each setting
as a Markdown table.

    python3 bench/checkpointing.py [--prompts 4] [--generations 8] [--max-new-tokens 16]
        [--image-size 448] [--steps 3] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics

from step_setup import ScriptResult, run_step_script

SETTINGS = {  # name -> grpo_step.py flags
    "shared, checkpointing off": [],
    "shared, checkpointing on": ["--gradient-checkpointing"],
    "unshared, checkpointing off": ["--no-group-shared"],
    "unshared, checkpointing on": ["--no-group-shared", "--gradient-checkpointing"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=448)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per run (after one warm-up)")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds; the table gives medians")
    args = parser.parse_args()
    shape = ["--prompts", str(args.prompts), "--generations", str(args.generations), "--max-new-tokens",
             str(args.max_new_tokens), "--image-size", str(args.image_size), "--steps", str(args.steps),
             "--full-length"]
    results: dict[str, list[ScriptResult]] = {name: [] for name in SETTINGS}
    for repeat in range(args.repeats):
        for name, flags in SETTINGS.items():
            result = run_step_script("grpo_step.py", [*shape, *flags])
            results[name].append(result)
            print(f"round {repeat + 1}: {name}: {result}", flush=True)
    print(f"\nP={args.prompts} G={args.generations}, {args.max_new_tokens} new tokens, "
          f"{args.image_size}x{args.image_size} images, median of {args.repeats} runs")
    print("| setting | step | update | peak RSS |\n|---|---|---|---|")
    for name, runs in results.items():
        step, update, rss = (statistics.median(getattr(run, field) for run in runs)
                             for field in ("seconds", "update_seconds", "peak_rss_mib"))
        print(f"| {name} | {step:.3f} s | {update:.3f} s | {rss:.0f} MiB |")


if __name__ == "__main__":
    main()
