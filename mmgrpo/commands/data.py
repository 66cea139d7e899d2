"""``mmgrpo data``: make a procedural dataset (``make``) or look inside one (``inspect``).

``mmgrpo data make --recipe clevr_count --n 200 --out DIR [--seed S] [--test-fraction F]``
plus any option of the recipe as a flag (``--image-size 224``, ``--max-objects 8``,
``--colours red blue``); the flags are derived from the recipes' option dataclasses.
``mmgrpo data inspect DIR`` prints the dataset info, row counts, skipped rows and a few rows.
"""

from __future__ import annotations

import argparse
import json
import typing
from typing import Any

from data_recipes.generators import GENERATORS
from data_recipes.make import make_dataset, recipe_options

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
    make.add_argument("--recipe", required=True, choices=GENERATORS.names())
    make.add_argument("--n", type=int, default=1000, help="number of examples (train + test)")
    make.add_argument("--out", required=True, help="output folder")
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--test-fraction", type=float, default=0.2)
    _add_recipe_options(make)
    make.set_defaults(_action=_make)
    inspect = actions.add_parser("inspect", help="print a dataset's info, counts, skipped rows and a few rows")
    inspect.add_argument("path", help="dataset folder or file")
    inspect.add_argument(
        "--split", action="append", help="split(s) to show (default: all of a generated dataset, else train)"
    )
    inspect.add_argument("--rows", type=int, default=3, help="rows to print per split")
    inspect.set_defaults(_action=_inspect)


def run(args: argparse.Namespace) -> int:
    return args._action(args)


def _make(args: argparse.Namespace) -> int:
    options = recipe_options(args.recipe)
    all_options = {name for recipe in GENERATORS for name in recipe_options(recipe)}
    stray = sorted(name for name in all_options - set(options) if getattr(args, name) is not None)
    if stray:
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in stray)
        raise SystemExit(f"{flags}: not an option of recipe {args.recipe!r}")
    chosen = {name: _option_value(getattr(args, name)) for name in options if getattr(args, name) is not None}
    try:
        info = make_dataset(args.recipe, args.n, args.out, seed=args.seed, test_fraction=args.test_fraction, **chosen)
    except ValueError as error:  # bad option values: a message, not a traceback
        raise SystemExit(f"mmgrpo data make: {error}") from error
    print(f"wrote {args.out}: {info['counts']} (recipe {args.recipe}, seed {args.seed})")
    return 0


def _option_value(value: Any) -> Any:
    """argparse gives lists for ``nargs``; recipe options are (hashable) tuples."""
    return tuple(value) if isinstance(value, list) else value


def _inspect(args: argparse.Namespace) -> int:
    from data_recipes.loading import load_rows
    from data_recipes.writer import read_info

    info = read_info(args.path)
    if info is not None:
        print(json.dumps({key: info[key] for key in ("recipe", "task", "seed", "counts") if key in info}))
    splits = args.split or (list(info["counts"]) if info else ["train"])
    for split in splits:
        loaded = load_rows(args.path, split=split)
        print(loaded.summary())
        for row in loaded.rows[: args.rows]:
            text = json.dumps(row, default=str)
            print("  " + (text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + " ..."))
    return 0
