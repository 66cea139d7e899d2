"""``mmgrpo train [recipe.yaml] [dotted.key=value ...]``: the GRPO job (embedded default without arguments)."""

from __future__ import annotations

import argparse
import json

from mmgrpo.commands.config import config_from_args


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", help="YAML file or recipe name in recipes/ (default: the embedded default)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. algo.beta=0.04")
    parser.add_argument(
        "--resume", nargs="?", const="latest", metavar="CHECKPOINT",
        help="continue the run named by log.run_name from its newest checkpoint (or the given folder)",
    )


def run(args: argparse.Namespace) -> int:
    from mmgrpo.trainer.pipeline import run_training

    overrides = [*args.overrides, *([f"checkpoint.resume={args.resume}"] if args.resume else [])]
    config = config_from_args("train", args.recipe, overrides)
    if config is None:
        return 2
    print(json.dumps(run_training(config), indent=2))
    return 0
