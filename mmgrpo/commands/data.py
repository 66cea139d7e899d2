"""``mmgrpo data``: make a procedural dataset (``make``) or look inside one (``inspect``).

``mmgrpo data make --recipe clevr_count --n 200 --out DIR [--seed S] [--test-fraction F]``
plus any option of the recipe as a flag (``--image-size 224``, ``--max-objects 8``,
``--colours red blue``); the flags are derived from the recipes' option dataclasses.
``mmgrpo data inspect DIR [--split S] [--adapter A] [--task T] [--media-root R]`` prints
the dataset info, then per split the rows a training run would use (after the adapter, the
media checks and the task's own row checks), the skipped rows by reason, and a few rows
(embedded media shown as their size, not their bytes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from typing import TYPE_CHECKING, Any

from data_recipes.generators import GENERATORS
from data_recipes.make import make_dataset, recipe_options

if TYPE_CHECKING:
    from data_recipes.loading import LoadedRows
    from tasks import Task

MAX_SHOWN_CHARS = 300  # a printed row is cut after this many characters


def _flag_kwargs(annotation: Any) -> dict[str, Any]:
    """argparse keyword arguments for a recipe option of this type (``tuple[int, ...]`` -> nargs)."""
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    if typing.get_origin(annotation) is tuple:
        return {"nargs": "+", "type": typing.get_args(annotation)[0]}
    return {"type": annotation}


def _add_recipe_options(parser: argparse.ArgumentParser) -> None:
    """One flag per option name found in any recipe; its help lists each recipe's default."""
    defaults: dict[str, dict[str, Any]] = {}
    annotations: dict[str, Any] = {}
    for recipe in GENERATORS:
        for name, (annotation, default) in recipe_options(recipe).items():
            if annotations.setdefault(name, annotation) != annotation:
                raise TypeError(f"recipe option {name!r} has different types in different recipes")
            defaults.setdefault(name, {})[recipe] = default
    group = parser.add_argument_group("recipe options (default per recipe)")
    for name, annotation in annotations.items():
        by_default: dict[str, list[str]] = {}
        for recipe, value in defaults[name].items():
            by_default.setdefault(str(value), []).append(recipe)
        shown = "; ".join(f"{value} ({', '.join(recipes)})" for value, recipes in by_default.items())
        flag = f"--{name.replace('_', '-')}"
        group.add_argument(flag, dest=name, default=None, help=shown, **_flag_kwargs(annotation))


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="data_action", metavar="ACTION", required=True)
    make = actions.add_parser("make", help="generate a procedural dataset (train/test jsonl + media)")
    make.add_argument("--recipe", required=True, help=f"data recipe: {', '.join(GENERATORS.names())} or a plugin's")
    make.add_argument("--n", type=int, default=1000, help="number of examples (train + test)")
    make.add_argument("--out", required=True, help="output folder")
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--test-fraction", type=float, default=0.2)
    _add_recipe_options(make)
    _add_plugin_flag(make)
    make.set_defaults(_action=_make)
    inspect = actions.add_parser("inspect", help="print a dataset's info, counts, skipped rows and a few rows")
    inspect.add_argument("path", help="dataset folder or file")
    inspect.add_argument(
        "--split", action="append", help="split(s) to show (default: all of a generated dataset, else train)"
    )
    inspect.add_argument("--rows", type=int, default=3, help="rows to print per split")
    inspect.add_argument("--adapter", help="column adapter of a public format (default: detected)")
    inspect.add_argument(
        "--task", help="task whose row checks apply (default: the task a generated dataset names; else none)"
    )
    inspect.add_argument("--media-root", help="folder tried first for relative media paths (e.g. VLM-R1's images)")
    _add_plugin_flag(inspect)
    inspect.set_defaults(_action=_inspect)


def _add_plugin_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
        help="task plugin registering recipes, adapters or tasks (repeatable; installed packages load without it)",
    )


def run(args: argparse.Namespace) -> int:
    from mmgrpo.plugins import load_plugins

    load_plugins(args.plugin)
    return args._action(args)


def _make(args: argparse.Namespace) -> int:
    GENERATORS.get(args.recipe)  # an unknown recipe: one line naming the known ones
    options = recipe_options(args.recipe)
    all_options = {name for recipe in GENERATORS for name in recipe_options(recipe)}
    stray = sorted(name for name in all_options - set(options) if getattr(args, name, None) is not None)
    if stray:
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in stray)
        raise ValueError(f"{flags}: not an option of recipe {args.recipe!r}")
    chosen = {name: _option_value(getattr(args, name)) for name in options if getattr(args, name, None) is not None}
    info = make_dataset(args.recipe, args.n, args.out, seed=args.seed, test_fraction=args.test_fraction, **chosen)
    print(f"wrote {args.out}: {info['counts']} (recipe {args.recipe}, seed {args.seed})")
    return 0


def _option_value(value: Any) -> Any:
    """argparse gives lists for ``nargs``; recipe options are (hashable) tuples."""
    return tuple(value) if isinstance(value, list) else value


def _inspect(args: argparse.Namespace) -> int:
    from data_recipes.loading import load_rows
    from data_recipes.writer import read_info
    from tasks import get_task

    info = read_info(args.path)
    if info is not None:
        print(json.dumps({key: info[key] for key in ("recipe", "task", "seed", "counts") if key in info}))
    splits = args.split or (list(info["counts"]) if info else ["train"])
    task_name = args.task or (info or {}).get("task")
    task = get_task(task_name) if task_name else None
    print(f"rows checked against task {task.name}" if task else "no --task: rows not checked against a task")
    for split in splits:
        loaded = load_rows(args.path, split=split, adapter=args.adapter, media_root=args.media_root)
        if task is not None:
            loaded = _task_checked(loaded, task)
        print(loaded.summary())
        for row in loaded.rows[: args.rows]:
            text = json.dumps(row, default=_printable)
            print("  " + (text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + " ..."))
    return 0


def _task_checked(loaded: LoadedRows, task: Task) -> LoadedRows:
    """``loaded`` less the rows ``task`` rejects, which join the skipped rows with their reason."""
    from mmgrpo.inputs import task_samples

    samples, rejected = task_samples(task, loaded.rows, loaded.source, think=False)
    usable = {sample.id for sample in samples}
    rows = [row for row in loaded.rows if str(row["id"]) in usable]
    return dataclasses.replace(loaded, rows=rows, skipped=[*loaded.skipped, *rejected])


def _printable(value: Any) -> str:
    """JSON stand-in for what json cannot print: embedded media bytes as their size, anything else as text."""
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return str(value)
