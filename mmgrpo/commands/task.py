"""``mmgrpo task``: write a new task package (``new``) or fuzz a task's rewards (``check``).

``mmgrpo task new NAME --modality image|video|audio|text [--out DIR]`` writes ``DIR/mmgrpo-NAME``: the
task and its accuracy reward, a seeded data recipe, a training recipe, reward tests and a
10-step smoke test, a README and a ``pyproject.toml`` whose ``mmgrpo.tasks`` entry point makes
``pip install -e DIR/mmgrpo-NAME`` register everything by name.

``mmgrpo task check NAME [recipe] [KEY=VALUE ...] [--data D] [--plugin P] [--rows N]`` turns the
task's rows into prompts and scores hostile completions (empty, 100k characters, junk, broken
tags, injected instructions, ...) and trivial ones (a constant answer, the question echoed, the
format alone) with every reward of the task: it reports rewards that raise, return non-finite or
out-of-range values, change between two calls, are slow, or pay a trivial completion at least
``--hack-threshold`` on average. Exit 1 on any finding, so a task repository can run it in CI.
Rows come from ``--data``, else the config's ``data.train``, else a generated dataset of the
data recipe made for the task (the one whose ``task`` is NAME, as ``mmgrpo task new`` writes).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="task_action", metavar="ACTION", required=True)
    new = actions.add_parser("new", help="write a working task package: task, rewards, data recipe, recipe, tests")
    new.add_argument("name", help="the task's name, a lower-case Python identifier (also the package's)")
    new.add_argument("--modality", required=True, choices=["image", "video", "audio", "text"])
    new.add_argument("--out", type=Path, default=Path("."), help="folder the package folder is written in (default: .)")
    new.set_defaults(_action=_new)
    check = actions.add_parser("check", help="fuzz a task's rewards with hostile and trivial completions")
    check.add_argument("name", help="the registered task (built in, or from a plugin)")
    check.add_argument("recipe", nargs="?", help="YAML recipe whose data.train rows are checked (default: see above)")
    check.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides")
    check.add_argument("--data", help="dataset folder or file whose train split is checked")
    check.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                       help="plugin registering the task (repeatable; installed packages load without it)")
    check.add_argument("--rows", type=int, default=16, help="rows checked at most (default: 16)")
    check.add_argument("--hack-threshold", type=float, default=0.5,
                       help="mean reward of a trivial completion that counts as hackable (default: 0.5)")
    check.add_argument("--slow-seconds", type=float, default=0.5, help="median seconds per call that counts as slow")
    check.set_defaults(_action=_check)


def run(args: argparse.Namespace) -> int:
    return args._action(args)


def _new(args: argparse.Namespace) -> int:
    from mmgrpo.scaffold import write_task_package

    root = write_task_package(args.name, args.modality, args.out)
    print(f"wrote {root}: pip install -e {root} && (cd {root} && python -m pytest), then mmgrpo train {root}/recipe.yaml")
    return 0


def _check(args: argparse.Namespace) -> int:
    from mmgrpo.commands.config import config_from_args
    from mmgrpo.config import DatasetConfig

    plugins = [f"task.plugins=[{', '.join(args.plugin)}]"] if args.plugin else []
    config = config_from_args("task", args.recipe, [*args.overrides, *plugins, f"task.name={args.name}"],
                              check_names=False)
    from data_recipes.loading import load_rows  # heavy imports once the config is known good
    from mmgrpo.inputs import build_task, generate_dataset
    from tasks.base import ModelInfo
    from tasks.check import check_dataset

    if args.data:
        specs = [DatasetConfig(path=args.data)]
    elif args.recipe and config.data.train:
        specs = config.data.train
    else:
        specs = [DatasetConfig(recipe=_recipe_of(args.name), recipe_args={"n": max(args.rows, 8)})]
    rows: list[dict] = []
    for spec in specs:
        path = generate_dataset(spec, Path(config.data.dir or Path(config.log.output_dir) / "_cache" / "data"),
                                config.data.seed) if spec.recipe else spec.path
        rows += load_rows(path, split=spec.split, adapter=spec.adapter, media_root=spec.media_root).rows
    task = build_task(args.name, config.task, ModelInfo())
    report = check_dataset(task, rows[: args.rows], hack_threshold=args.hack_threshold, slow_seconds=args.slow_seconds,
                           max_rows=args.rows)
    print(report.render())
    return 0 if report.ok else 1


def _recipe_of(task_name: str) -> str:
    """The data recipe registered for ``task_name`` (its ``task`` attribute names it)."""
    from data_recipes.generators.base import GENERATORS

    made_for = [name for name in GENERATORS if getattr(GENERATORS.get(name), "task", None) == task_name]
    if not made_for:
        raise ValueError(f"no data recipe makes rows for task {task_name!r}; give --data or a recipe with data.train")
    return made_for[0]
