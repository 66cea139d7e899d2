"""Every recipe in ``recipes/`` loads, validates, names parts that exist and sets only what it changes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from data_recipes.adapters import ADAPTERS
from data_recipes.generators import GENERATORS
from mmgrpo.config import Config, load_config
from mmgrpo.config.loading import RECIPES_DIR
from tasks import REWARDS

RECIPES = sorted(RECIPES_DIR.glob("*.yaml"))
EXPECTED = {
    "default", "clevr70k_qwen2_5_vl_3b", "clevr70k_qwen2_5_vl_7b", "geometry3k", "grounding", "video_count",
    "audio_count",
}


def recipe_id(path: Path) -> str:
    return path.stem


def repeated_defaults(recipe: dict[str, Any], loaded: Any, default: Any, prefix: str = "") -> Iterator[str]:
    """Dotted keys ``recipe`` sets whose loaded value equals the default, walked section by section."""
    for key, value in recipe.items():
        mine, base = getattr(loaded, key), getattr(default, key)
        if dataclasses.is_dataclass(base):
            yield from repeated_defaults(value, mine, base, f"{prefix}{key}.")
        elif mine == base:
            yield f"{prefix}{key}"


def test_the_issue_recipes_are_there():
    assert EXPECTED <= {path.stem for path in RECIPES}


@pytest.mark.parametrize("path", RECIPES, ids=recipe_id)
def test_recipe_loads_and_validates(path: Path):
    config = load_config(path)
    assert isinstance(config, Config)
    assert load_config(path.stem) == config  # also reachable by name


@pytest.mark.parametrize("path", RECIPES, ids=recipe_id)
def test_recipe_names_registered_adapters_generators_and_rewards(path: Path):
    config = load_config(path)
    for spec in [*config.data.train, *config.data.test, *config.sft.data]:
        if spec.adapter is not None:
            ADAPTERS.get(spec.adapter)
        if spec.recipe is not None:
            GENERATORS.get(spec.recipe)
    for reward in config.task.rewards:
        REWARDS.get(reward)


@pytest.mark.parametrize("path", RECIPES, ids=recipe_id)
def test_recipe_sets_only_keys_that_differ_from_the_defaults(path: Path):
    same = list(repeated_defaults(yaml.safe_load(path.read_text()), load_config(path), Config()))
    assert not same, f"{path.name} repeats default values: {', '.join(same)}"


@pytest.mark.parametrize("path", [p for p in RECIPES if p.stem != "default"], ids=recipe_id)
def test_recipe_header_says_what_it_is_and_how_to_run_it(path: Path):
    text = path.read_text()
    assert text.startswith("# ")
    assert f"mmgrpo train recipes/{path.name}" in text
