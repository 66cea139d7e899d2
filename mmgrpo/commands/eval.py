"""``mmgrpo eval``: benchmark models or checkpoints on tasks and published benchmarks, with reports.

``mmgrpo eval --model PATH_OR_ID [--model PATH2 ...] --task clevr_count --data DIR
[--split test] [--adapter A] [--media-root DIR] [--limit N] [--samples k --temperature t] [--out DIR] [--seed S]``;
``mmgrpo eval --model M --benchmark mathvista_testmini=DIR --benchmark mmmu_val=DIR [--prompt-style task]``
(each benchmark read from its files as published, scored by its own rules), or by names only:
``--benchmarks mathvista_testmini,mmmu_val --benchmark-root ROOT`` (each read from ``ROOT/<name>``);
``mmgrpo eval --predictions FILE.jsonl --benchmark NAME=DIR [--predictions-model PATH_OR_ID]`` (saved completions
scored the same way, no model run; the model that wrote them, when named, sets how its boxes are read); or ``mmgrpo eval --recipe eval.yaml [KEY=VALUE ...]`` where the recipe is an mmgrpo config
whose ``data.test`` lists the task/dataset pairs, ``eval.benchmarks`` the benchmarks and ``eval.*`` the
options. Flags override the recipe. Writes results.json, report.md, report.html, samples.jsonl,
accuracy.png and eval.log (and submission-<benchmark>.json for a split whose answers are hidden) into ``--out``.
Under ``torchrun --nproc_per_node N -m mmgrpo eval ...`` the ranks split the items; a run stopped
midway continues from what it scored when run again with the same ``--out`` and settings.

``mmgrpo eval --compare RUN_A RUN_B [--out DIR]`` compares two evaluation output folders (or per-model
folders ``models/<i>-<name>``) item by item (:mod:`eval.compare`): prints the table and writes
compare.md and compare.json into ``--out`` (default: RUN_B).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mmgrpo.config import BenchmarkConfig

LOG_FILE = "eval.log"  # in the output folder
# flag (argparse dest) -> the config key it overrides
FLAG_KEYS = {
    "task": "task.name",
    "limit": "eval.limit",
    "samples": "eval.samples",
    "temperature": "eval.temperature",
    "max_new_tokens": "eval.max_new_tokens",
    "batch_size": "eval.batch_size",
    "seed": "seed",
    "prompt_style": "eval.prompt_style",
    "predictions": "eval.predictions",
    "predictions_model": "eval.predictions_model",
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides, e.g. task.think=true")
    parser.add_argument("--recipe", help="YAML config: data.test = task/dataset pairs, eval.* = options")
    parser.add_argument(
        "--model", action="append", metavar="PATH_OR_ID",
        help="model folder, Hub id or tiny:<family>; repeat to compare side by side (default: model.name_or_path)",
    )
    parser.add_argument("--task", help="registered task of --data (default: task.name)")
    parser.add_argument("--data", help="dataset folder or file, e.g. from `mmgrpo data make` (default: data.test)")
    parser.add_argument("--split", default="test", help="split of --data (default: test)")
    parser.add_argument("--adapter", help="column adapter of --data (default: detected)")
    parser.add_argument(
        "--media-root", help="folder tried first for relative media paths of --data (VLM-R1 keeps images apart)"
    )
    parser.add_argument(
        "--benchmark", action="append", metavar="NAME=PATH",
        help="published benchmark and its downloaded files, e.g. mmmu_val=data/MMMU; repeat for several "
        "(replaces eval.benchmarks; docs/benchmarks.md lists them and the files each expects)",
    )
    parser.add_argument(
        "--benchmarks", metavar="NAME[,NAME...]", help="published benchmarks by name, each read from "
        "<--benchmark-root>/<name> (a folder or file named as the benchmark; added to any --benchmark)",
    )
    parser.add_argument("--benchmark-root", metavar="DIR", help="folder holding one entry per --benchmarks name")
    parser.add_argument(
        "--compare", nargs=2, metavar=("RUN_A", "RUN_B"), help="compare two evaluation output folders item by "
        "item (accuracy, difference, paired test per benchmark and category) instead of evaluating",
    )
    parser.add_argument("--prompt-style", choices=("official", "task"), help="benchmark prompts (eval.prompt_style)")
    parser.add_argument(
        "--predictions", metavar="FILE.jsonl", help="score saved completions ({id, completion} lines) on the "
        "benchmarks instead of generating (eval.predictions)",
    )
    parser.add_argument(
        "--predictions-model", metavar="PATH_OR_ID", help="the model that wrote --predictions (folder, Hub id or "
        "tiny:<family>): its family and image budget set how boxes are read (eval.predictions_model; default: "
        "Qwen2.5-VL at the default budget)",
    )
    parser.add_argument("--limit", type=int, help="at most N items per dataset (eval.limit) and per benchmark")
    parser.add_argument("--samples", type=int, help="completions per item; k > 1 reports pass@k and mean@k")
    parser.add_argument("--temperature", type=float, help="0 = greedy (needed > 0 with --samples > 1)")
    parser.add_argument("--max-new-tokens", type=int, help="most tokens per completion")
    parser.add_argument("--batch-size", type=int, help="prompts per generate call")
    parser.add_argument("--seed", type=int, help="sampling and bootstrap seed")
    parser.add_argument("--out", help="output folder (default: <log.output_dir>/eval-<timestamp>)")


def run(args: argparse.Namespace) -> int:
    from mmgrpo.config import BenchmarkConfig, ConfigError, DatasetConfig, load_config
    from mmgrpo.commands.preflight import preflight

    if args.compare:
        return _compare(args)
    if os.environ.get("WORLD_SIZE", "1") != "1" and not args.out:
        raise ConfigError("under several ranks give --out: the ranks share the output folder (each would name its own)")
    with _validated_as_one_process():
        overrides = [f"{key}={getattr(args, flag)}" for flag, key in FLAG_KEYS.items() if getattr(args, flag) is not None]
        config = load_config(args.recipe, [*args.overrides, *overrides])
        if args.media_root and not args.data:
            raise ConfigError("--media-root applies to --data; a recipe's datasets set data.test[i].media_root")
        if args.data:
            config.data.test = [DatasetConfig(
                path=args.data, split=args.split, adapter=args.adapter, task=args.task, media_root=args.media_root,
            )]
            config.validate()
        if args.benchmark_root and not args.benchmarks:
            raise ConfigError("--benchmark-root applies to --benchmarks NAME[,NAME...]")
        if args.benchmark or args.benchmarks:
            config.eval.benchmarks = [BenchmarkConfig(*_name_and_path(text)) for text in args.benchmark or []]
            config.eval.benchmarks += _named_benchmarks(args.benchmarks, args.benchmark_root)
        if args.limit is not None:  # --limit caps benchmarks too (eval.limit, a training-time default, does not)
            config.eval.benchmarks = [
                dataclasses.replace(spec, limit=min(spec.limit or args.limit, args.limit)) for spec in config.eval.benchmarks
            ]
    _check_benchmarks(config.eval.benchmarks)
    if config.eval.judge is not None and config.eval.judge not in [m.name for m in config.task.reward_models]:
        raise ConfigError(f"eval.judge {config.eval.judge!r} names no task.reward_models entry")
    benchmarks_only = bool(config.eval.benchmarks) and not args.data
    preflight(config, datasets=[] if benchmarks_only else ["data.test"], check_model=False)
    from eval import comparison_table, run_config  # heavy imports once the config is known good

    out = Path(args.out) if args.out else Path(config.log.output_dir) / time.strftime("eval-%Y%m%d-%H%M%S")
    main = int(os.environ.get("RANK", "0")) == 0  # under torchrun every rank evaluates its block; the main one reports
    with _logging_to(out / LOG_FILE) if main else contextlib.nullcontext():
        results = run_config(config, out, models=args.model, explicit_data=bool(args.data))
    if main:
        print(comparison_table(results))
        print(f"wrote {out}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    """``--compare RUN_A RUN_B``: the item-by-item comparison, printed and written."""
    from eval.compare import compare, comparison_markdown, load_scores, write_comparison
    from mmgrpo.config import ConfigError

    mixed = [f"--{flag.replace('_', '-')}" for flag in ("model", "benchmark", "benchmarks", "data", "predictions",
                                                             "predictions_model")
             if getattr(args, flag)]
    if mixed:
        raise ConfigError(f"--compare takes two evaluation output folders and no {', '.join(mixed)}")
    folder_a, folder_b = (Path(path) for path in args.compare)
    rows = compare(load_scores(folder_a), load_scores(folder_b), seed=args.seed or 0)
    paths = write_comparison(rows, Path(args.out) if args.out else folder_b, str(folder_a), str(folder_b))
    print(comparison_markdown(rows, str(folder_a), str(folder_b)))
    print(f"wrote {paths['markdown']} and {paths['json']}")
    return 0


def _named_benchmarks(names: str | None, root: str | None) -> list[BenchmarkConfig]:
    """``--benchmarks a,b`` with ``--benchmark-root ROOT``: each benchmark read from ``ROOT/<name>``."""
    from eval.benchmarks import BENCHMARKS
    from mmgrpo.config import BenchmarkConfig, ConfigError

    if not names:
        return []
    if not root:
        raise ConfigError("--benchmarks needs --benchmark-root DIR (each benchmark's files in DIR/<name>)")
    specs = []
    for name in filter(None, (part.strip() for part in names.split(","))):
        if name not in BENCHMARKS:
            raise ConfigError(f"--benchmarks: unknown benchmark {name!r}; known: {', '.join(BENCHMARKS.names())}")
        path = Path(root).expanduser() / name
        if not path.exists():
            raise ConfigError(f"--benchmarks: {name} files not found at {str(path)!r} "
                              f"(expected: {BENCHMARKS.get(name).layout})")
        specs.append(BenchmarkConfig(name, str(path)))
    return specs


@contextlib.contextmanager
def _validated_as_one_process() -> Iterator[None]:
    """Config checks as for one process: the data-parallel rules of training (a distributed back end, batch
    sizes that split by rank) do not bind eval, whose ranks split the items instead."""
    launched = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = "1"
    try:
        yield
    finally:
        if launched is None:
            del os.environ["WORLD_SIZE"]
        else:
            os.environ["WORLD_SIZE"] = launched


@contextlib.contextmanager
def _logging_to(path: Path) -> Iterator[None]:
    """INFO and above (progress with rate and ETA, resuming, warnings) also go to ``path`` during the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(min(previous, logging.INFO))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
        handler.close()


def _name_and_path(text: str) -> tuple[str, str]:
    """``NAME=PATH`` of ``--benchmark``."""
    from mmgrpo.config import ConfigError

    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ConfigError(f"--benchmark takes NAME=PATH (e.g. mmmu_val=data/MMMU), got {text!r}")
    return name, path


def _check_benchmarks(specs: Sequence[BenchmarkConfig]) -> None:
    """Every benchmark registered and its files there, before any model loads (one line each)."""
    from eval.benchmarks import BENCHMARKS
    from mmgrpo.config import ConfigError

    for spec in specs:
        if spec.name not in BENCHMARKS:
            raise ConfigError(f"eval.benchmarks: unknown benchmark {spec.name!r}; known: {', '.join(BENCHMARKS.names())}")
        if not Path(spec.path).expanduser().exists():
            layout = BENCHMARKS.get(spec.name).layout
            raise ConfigError(f"eval.benchmarks: {spec.name} files not found at {spec.path!r} (expected: {layout})")
