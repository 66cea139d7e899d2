"""``mmgrpo sweep [recipe] [k=v ...] --space SPACE.yaml --trials N [--parallel K]``: hyperparameter search.

Optuna's TPE sampler proposes values for the config keys in SPACE.yaml; each trial is a normal
run folder under ``--out`` (default ``<log.output_dir>/sweep``), scored by ``--metric`` of its
held-out evaluation after GRPO and, when the recipe evaluates every ``eval.every_n_steps``,
pruned early by the median rule. The study lives in ``<out>/study.db``: the same command resumes
a stopped sweep. ``<out>/sweep.md`` lists the trials, the best one and parameter importances.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", help="recipe YAML or name (default: the embedded default)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for every trial")
    parser.add_argument("--space", required=True, type=Path, help="YAML: config key -> {type, low, high | choices}")
    parser.add_argument("--trials", required=True, type=int, help="trials to finish (pruned ones count)")
    parser.add_argument("--parallel", type=int, default=1, help="trials trained at once (default 1)")
    parser.add_argument("--metric", default="accuracy", help="held-out eval metric to optimise (default accuracy)")
    parser.add_argument("--direction", choices=("maximize", "minimize"), default="maximize")
    parser.add_argument("--out", type=Path, help="sweep folder (default <log.output_dir>/sweep)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the TPE sampler")
    parser.add_argument("--no-pruning", action="store_true", help="train every trial to the end")
    parser.add_argument("--startup-trials", type=int, default=2, help="median pruner: finished trials before pruning")
    parser.add_argument("--warmup-steps", type=int, default=0, help="median pruner: steps before a trial can be pruned")


def run(args: argparse.Namespace) -> int:
    from mmgrpo.config import Config, load_config
    from mmgrpo.reports.run_data import flatten
    from mmgrpo.sweep.space import SearchSpace
    from mmgrpo.sweep.study import SweepOptions, run_sweep
    from mmgrpo.sweep.summary import write_summary

    import importlib.util

    if importlib.util.find_spec("optuna") is None:
        raise ImportError("mmgrpo sweep needs Optuna: pip install -e '.[sweep]'")
    recipe, overrides = _split_recipe(args.recipe, args.overrides)
    config = load_config(recipe, overrides)  # the base config must be valid before any trial starts
    if not config.eval.after:
        raise ValueError("a sweep scores each trial by its evaluation after GRPO: eval.after must be true")
    if args.trials < 1 or args.parallel < 1:
        raise ValueError("--trials and --parallel must be at least 1")
    space = SearchSpace.load(args.space, set(flatten(Config().to_dict())))
    out = args.out or Path(config.log.output_dir) / "sweep"
    options = SweepOptions(
        recipe=recipe, overrides=tuple(overrides), space=space, out=out, trials=args.trials, parallel=args.parallel,
        metric=args.metric, direction=args.direction, seed=args.seed, prune=not args.no_pruning,
        startup_trials=args.startup_trials, warmup_steps=args.warmup_steps,
    )
    study = run_sweep(options)
    print(write_summary(study, out, args.metric))
    return 0


def _split_recipe(recipe: str | None, overrides: list[str]) -> tuple[str | None, list[str]]:
    """A first positional argument with '=' is an override, not a recipe."""
    if recipe is not None and "=" in recipe:
        return None, [recipe, *overrides]
    return recipe, list(overrides)
