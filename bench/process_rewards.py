"""Process rewards against outcome-only rewards on the same budget (recipes/counting_process.yaml).

Both settings run the whole recipe (cold-start SFT listing the objects, eval before, GRPO, eval
after) in their own process, one after another: ``process`` rewards count, format and each
listed line (``object_mentions``); ``outcome`` only count and format. Same seed, same steps,
same samples. Reported: held-out accuracy before and after GRPO, the share of the listed lines
in the held-out completions that name an object the scene has (before and after GRPO), and
the median step time of the last 20 GRPO steps.

    python3 bench/process_rewards.py [--steps 200] [--seeds 0 1] [--only process] [extra overrides]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tasks.object_mentions import mention_steps

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "counting_process.yaml"
SETTINGS = {  # name -> overrides
    "process": [],
    "outcome": ["task.rewards={format: 0.1, count_accuracy: 1.0}"],
}
LAST_STEPS = 20


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="GRPO steps")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seed and data.seed of each run")
    parser.add_argument("--only", choices=sorted(SETTINGS), action="append", help="run only these settings")
    parser.add_argument("--output", type=Path, help="where runs go (default: a temporary folder)")
    parser.add_argument("overrides", nargs="*", help="more config overrides for every setting")
    return parser.parse_args()


def real_line_share(folder: Path, tag: str) -> float:
    """Share of listed object lines that name a real object in the held-out completions of eval ``tag``."""
    scores, scenes = [], {}
    for line in (folder / "eval" / tag / "samples.jsonl").read_text().splitlines():
        record = json.loads(line)
        dataset = Path(record["media"][0]).parent.parent  # the run's own dataset (ids repeat across seeds)
        if dataset not in scenes:
            rows = map(json.loads, (dataset / "test.jsonl").read_text().splitlines())
            scenes[dataset] = {row["id"]: row["objects"] for row in rows}
        steps = mention_steps(record["completion"], scenes[dataset][record["prompt_id"]])
        scores += [score for start, end, score in steps if start < end]  # listed lines, not missed objects
    return statistics.mean(score > 0 for score in scores) if scores else float("nan")


def run(name: str, overrides: list[str], work: Path) -> dict[str, float]:
    run_name = f"{name}-{overrides[1].replace('=', '')}"
    command = [
        sys.executable, "-m", "mmgrpo", "train", str(RECIPE), f"log.output_dir={work / 'runs'}",
        f"log.run_name={run_name}", "log.progress_bar=false", f"data.dir={work / 'data'}", *overrides,
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    folder = work / "runs" / run_name
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()][-LAST_STEPS:]
    return {
        "before": summary["accuracy_before_grpo"],
        "after": summary["accuracy_after_grpo"],
        "real_before": real_line_share(folder, "before"),
        "real_after": real_line_share(folder, "after"),
        "step_s": statistics.median(row["time/step"] for row in rows),
        "grpo_s": summary["grpo_seconds"],
    }


def main() -> None:
    args = parse_args()
    work = args.output or Path(tempfile.mkdtemp(prefix="mmgrpo-process-bench-"))
    print("| setting | seed | held-out accuracy before -> after GRPO | held-out listed lines naming a real object "
          "before -> after | median step s | GRPO s |")
    print("|---|---|---|---|---|---|")
    for seed in args.seeds:
        common = [f"train.steps={args.steps}", f"seed={seed}", f"data.seed={seed}", *args.overrides]
        for name in args.only or list(SETTINGS):
            r = run(name, [*common, *SETTINGS[name]], work)
            print(f"| {name} | {seed} | {100 * r['before']:.1f}% -> {100 * r['after']:.1f}% | "
                  f"{100 * r['real_before']:.1f}% -> {100 * r['real_after']:.1f}% | {r['step_s']:.2f} | "
                  f"{r['grpo_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
