"""``mmgrpo train [recipe.yaml] [dotted.key=value ...]``: the GRPO job (embedded default without arguments)."""

from __future__ import annotations

import argparse
import json
import sys

from mmgrpo.commands.config import split_recipe


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", help="YAML file or recipe name in recipes/ (default: the embedded default)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. algo.beta=0.04")
    parser.add_argument(
        "--resume", nargs="?", const="latest", metavar="CHECKPOINT",
        help="continue the run named by log.run_name from its newest checkpoint (or the given folder)",
    )


def run(args: argparse.Namespace) -> int:
    from mmgrpo.config import ConfigError, load_config
    from mmgrpo.trainer.pipeline import run_training

    recipe, overrides = split_recipe(args.recipe, args.overrides)
    if args.resume:
        overrides.append(f"checkpoint.resume={args.resume}")
    try:
        config = load_config(recipe, overrides)
    except ConfigError as error:
        print(f"mmgrpo train: {error}", file=sys.stderr)
        return 2
    summary = run_training(config)
    print(json.dumps(summary, indent=2))
    return 0
