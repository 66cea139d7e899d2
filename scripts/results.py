#!/usr/bin/env python3
"""Re-run every recipe in recipes/ and write the table of docs/results.md.

    python3 scripts/results.py --dry-run            # the commands it would run, nothing else
    python3 scripts/results.py                      # every recipe, one after another (hours on CPU)
    python3 scripts/results.py --only code --only grounding
    python3 scripts/results.py --only arithmetic --quick --out /tmp/results.md   # a 2-step smoke run

Each recipe runs with the command its header comment documents (``mmgrpo train recipes/NAME.yaml``,
or the ``torchrun`` line of a multi-GPU recipe), in this checkout's root, with ``mmgrpo`` run as
``python -m mmgrpo`` by this interpreter (so the code measured is this checkout's) and two
overrides that only say where the run goes: ``log.output_dir=RUNS log.run_name=NAME``. The
preprocessing cache starts empty (``MMGRPO_CACHE_DIR=RUNS/_prompt_cache``), as in the measured runs.
Recipes whose model is not a tiny one need CUDA (and, for ``torchrun``, as many GPUs as processes);
without them they are skipped, and their rows keep what the table said.

A run folder that already holds ``summary.json`` is read, not run again, and one without it is
resumed (``--resume``), so the same command continues a stopped session. Each row of the table
gets the date its run finished and the commit it ran at (``+dirty`` when tracked files differed
from it). Only the lines between the two ``results-table`` markers of the output file change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
RESULTS = ROOT / "docs" / "results.md"
BEGIN = "<!-- results-table: begin (written by scripts/results.py) -->"
END = "<!-- results-table: end -->"
HEADER = (
    "| recipe | command | held-out accuracy (n) | before GRPO (95% CI) | after GRPO (95% CI) | gain | wall "
    "| measured | commit |\n|---|---|---|---|---|---|---|---|---|"
)
# A few-step smoke run of a CPU recipe (the "quick check" its header names): checks the pipeline, not the numbers.
QUICK = ["train.steps=2", "sft.steps=2", "eval.limit=4"]
QUICK_DATA = ["data.train.0.recipe_args.n=20", "data.test.0.recipe_args.n=20"]
COMMAND = re.compile(r"^(?:.*\s)?(?:-m\s+)?mmgrpo train recipes/(?P<name>[\w.-]+)\.yaml\b")


@dataclass
class Recipe:
    name: str
    path: Path
    command: list[str]  # as documented, with `mmgrpo` spelled out
    gpus: int  # 0: runs on a CPU

    @property
    def documented(self) -> str:
        return shlex.join(self.command)


def documented_command(path: Path) -> list[str]:
    """The first command in the recipe's header comment that trains this recipe (with its
    backslash-continued lines), else ``mmgrpo train recipes/NAME.yaml``."""
    comment = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    for index, line in enumerate(comment):
        found = COMMAND.match(line)
        if found and found.group("name") == path.stem:
            text = line
            while text.endswith("\\") and index + 1 < len(comment):
                index += 1
                text = text[:-1].rstrip() + " " + comment[index]
            return shlex.split(text)
    return ["mmgrpo", "train", f"recipes/{path.name}"]


def gpus_needed(path: Path, command: list[str]) -> int:
    model = (yaml.safe_load(path.read_text()) or {}).get("model") or {}
    name = str(model.get("name_or_path") or "tiny:")  # the default policy is a tiny one
    if name.startswith("tiny:"):
        return 0
    for flag in ("--nproc-per-node", "--nproc_per_node"):
        if flag in command:
            return int(command[command.index(flag) + 1])
    return 1


def recipes() -> list[Recipe]:
    found = []
    for path in sorted(RECIPES.glob("*.yaml")):
        command = documented_command(path)
        found.append(Recipe(path.stem, path, command, gpus_needed(path, command)))
    return found


def cuda_devices() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def launch(recipe: Recipe, runs: Path, quick: bool, resume: bool) -> list[str]:
    """The documented command as run here: this interpreter's ``-m mmgrpo``, the run folder named."""
    command = list(recipe.command)
    if command[0] == "mmgrpo":
        command = [sys.executable, "-m", "mmgrpo", *command[1:]]
    command += [f"log.output_dir={runs}", f"log.run_name={recipe.name}"]
    if quick:
        command += QUICK
        data = (yaml.safe_load(recipe.path.read_text()) or {}).get("data") or {}
        if recipe.name == "default" or all(
            isinstance(data.get(split), list) and "recipe_args" in data[split][0] for split in ("train", "test")
        ):
            command += QUICK_DATA
    if resume:
        command.append("--resume")
    return command


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def commit() -> str:
    """The checkout's short commit, ``+dirty`` when tracked files differ from it; ``unknown`` outside git."""
    try:
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def percent(summary: dict[str, Any], key: str) -> str:
    value = summary.get(key)
    if value is None:
        return "-"
    low, high = summary.get(f"{key}_ci_low"), summary.get(f"{key}_ci_high")
    interval = f" [{100 * low:.1f}, {100 * high:.1f}]" if low is not None and high is not None else ""
    return f"{100 * value:.1f}%{interval}"


def duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def evaluation(run_dir: Path, tag: str) -> dict[str, Any]:
    """The summary numbers of the run's held-out evaluation ``before`` or ``after`` GRPO ({} if not run)."""
    path = run_dir / "eval" / tag / "results.json"
    if not path.is_file():
        return {}
    models = json.loads(path.read_text())["models"]
    return next(iter(models.values()))["summary"]


def rows_of_run(recipe: Recipe, run_dir: Path, measured: str, at: str) -> dict[str, str]:
    """Table rows (keyed by their first cell) of a finished run: one, or one per task of a mixed run."""
    before, after = evaluation(run_dir, "before"), evaluation(run_dir, "after")
    wall = duration(json.loads((run_dir / "summary.json").read_text())["wall_seconds"])
    numbers = after or before
    tasks = sorted({key.split("/")[0] for key in numbers if key.endswith("/n") and key.count("/") == 1})
    prefixes = [(recipe.name, "")] if len(tasks) < 2 else [(f"{recipe.name}: {task}", f"{task}/") for task in tasks]
    rows = {}
    for label, prefix in prefixes:
        key = prefix + "accuracy"
        gain = f"{100 * (after[key] - before[key]):+.1f}" if key in after and key in before else "-"
        cells = [
            label, f"`{recipe.documented}`", f"{numbers.get(prefix + 'n', '-')}",
            percent(before, key), percent(after, key), gain, wall, measured, at,
        ]
        rows[label] = "| " + " | ".join(cells) + " |"
    return rows


def read_table(path: Path) -> tuple[str, dict[str, str], str]:
    text = path.read_text() if path.is_file() else f"{BEGIN}\n{HEADER}\n{END}\n"
    if BEGIN not in text or END not in text:
        raise SystemExit(f"results.py: error: {path} has no {BEGIN!r} ... {END!r} markers")
    head, rest = text.split(BEGIN, 1)
    table, tail = rest.split(END, 1)
    rows = {}
    for line in table.strip().splitlines()[2:]:  # after the header and its rule
        rows[line.split("|")[1].strip()] = line
    return head, rows, tail


def write_table(path: Path, head: str, rows: dict[str, str], tail: str) -> None:
    body = "\n".join(rows[key] for key in sorted(rows))
    path.write_text(f"{head}{BEGIN}\n{HEADER}\n{body}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="list the commands, run nothing, write nothing")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="these recipes only (repeatable)")
    parser.add_argument("--runs", type=Path, help="folder of the runs (default: runs/results-<commit>)")
    parser.add_argument("--out", type=Path, help="the file whose table is rewritten (default: docs/results.md; "
                        "with --quick: RUNS/results.md)")
    parser.add_argument("--quick", action="store_true", help="2-step smoke runs on small data (numbers meaningless)")
    args = parser.parse_args(argv)

    chosen = recipes()
    unknown = set(args.only) - {recipe.name for recipe in chosen}
    if unknown:
        parser.error(f"no recipe named {', '.join(sorted(unknown))} in {RECIPES}")
    if args.only:
        chosen = [recipe for recipe in chosen if recipe.name in args.only]
    at = commit()
    runs = (args.runs or ROOT / "runs" / f"results-{at}{'-quick' if args.quick else ''}").resolve()
    out = args.out or (runs / "results.md" if args.quick else RESULTS)
    devices = cuda_devices()

    if not args.dry_run:
        head, rows, tail = read_table(out)
        runs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MMGRPO_CACHE_DIR": str(runs / "_prompt_cache")}
    failed = []
    for recipe in chosen:
        run_dir = runs / recipe.name
        done = (run_dir / "summary.json").is_file()
        command = launch(recipe, runs, args.quick, resume=run_dir.is_dir() and not done)
        if recipe.gpus > devices:
            print(f"# {recipe.name}: skipped, needs {recipe.gpus} GPU(s), {devices} here: {recipe.documented}")
            continue
        print(f"# {recipe.name}: {'already run, read' if done else 'run'}: {recipe.documented}")
        print(shlex.join(command), flush=True)
        if args.dry_run:
            continue
        if not done:
            (runs / f"{recipe.name}.commit").write_text(at + "\n")  # the code it ran (also when resumed later)
            started = time.perf_counter()
            finished = subprocess.run(command, cwd=ROOT, env=env)
            print(f"# {recipe.name}: exit status {finished.returncode} after {duration(time.perf_counter() - started)}",
                  flush=True)
            if finished.returncode != 0:
                failed.append(recipe.name)
                continue
        measured = time.strftime("%Y-%m-%d", time.gmtime((run_dir / "summary.json").stat().st_mtime))
        ran_at = runs / f"{recipe.name}.commit"
        rows |= rows_of_run(recipe, run_dir, measured, ran_at.read_text().strip() if ran_at.is_file() else at)
        write_table(out, head, rows, tail)  # after each run, so a stopped session keeps what it measured
        print(f"# {recipe.name}: table written to {out}", flush=True)
    if failed:
        print(f"results.py: error: failed runs: {', '.join(failed)} (logs in their train.log under {runs})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
