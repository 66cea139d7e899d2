"""``mmgrpo config [recipe] [key=value ...]``: print the resolved config, or every key's docs.

Use it to check a recipe and its overrides before a run (it also checks that the plugins,
rewards, datasets and model the config names exist, exit status 2 if not), or as
``--describe`` to see every key with its type, default and help text.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from mmgrpo.config import Config


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", help="YAML file or recipe name in recipes/ (default: embedded default)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. algo.beta=0.04")
    parser.add_argument("--describe", action="store_true", help="list every config key with its type, default and help")


def run(args: argparse.Namespace) -> int:
    from mmgrpo.config import describe_config

    if args.describe:
        print(describe_config())
        return 0
    from mmgrpo.commands.preflight import preflight

    config = config_from_args("config", args.recipe, args.overrides, check_names=False)
    print(yaml.safe_dump(config.to_dict(), sort_keys=False), end="")
    preflight(config)  # after printing: the resolved config helps to see what is missing
    return 0


def split_recipe(first: str | None, rest: list[str]) -> tuple[str | None, list[str]]:
    """argparse puts a lone ``key=value`` in the recipe slot; move it back to the overrides."""
    if first is not None and "=" in first:
        return None, [first, *rest]
    return first, rest


def config_from_args(command: str, recipe: str | None, overrides: list[str], *, check_names: bool = True) -> Config:
    """The validated config of a command's recipe + overrides; ``ConfigError`` (printed by the
    command line as one line per problem, exit 2) if invalid.

    With ``check_names`` what it names (rewards, tasks, datasets, model) is checked too
    (:func:`~mmgrpo.commands.preflight.preflight`), before the command does any heavy work.
    """
    from mmgrpo.config import load_config
    from mmgrpo.commands.preflight import preflight

    recipe, overrides = split_recipe(recipe, overrides)
    config = load_config(recipe, overrides)
    if check_names:
        preflight(config)
    return config
