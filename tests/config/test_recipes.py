"""Every recipe in ``recipes/`` loads, validates, names registered parts and sets only what it changes;
the CPU recipes run one step of each phase."""

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
from mmgrpo.trainer.pipeline import run_training
from tasks import REWARDS

RECIPES = sorted(RECIPES_DIR.glob("*.yaml"))
EXPECTED = {
    "default", "clevr70k_qwen2_5_vl_3b", "clevr70k_qwen2_5_vl_7b", "geometry3k", "grounding", "video_count",
    "audio_count", "arithmetic", "mixed",
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


TINY_RECIPES = [p for p in RECIPES if load_config(p).model.name_or_path.startswith("tiny:")]


@pytest.mark.parametrize("path", TINY_RECIPES, ids=recipe_id)
def test_tiny_recipe_runs_sft_eval_and_grpo(path: Path, tmp_path: Path):
    """Each CPU recipe's modality goes through the whole pipeline (one step of each phase, a few items)."""
    shipped = load_config(path)
    small_data = [
        f"data.{split}.{index}.recipe_args={{n: 10, test_fraction: 0.2}}"
        for split in ("train", "test") for index in range(len(getattr(shipped.data, split)))
    ]
    config = load_config(path, [
        f"log.output_dir={tmp_path}", "log.progress_bar=false", "log.tensorboard=false", "train.steps=1",
        "sft.steps=1", "sft.batch_size=8", "sft.micro_batch_size=8", "eval.limit=2", "rollout.prompts_per_step=2",
        "rollout.num_generations=2", "train.micro_batch_size=4", "checkpoint.every_n_steps=0", *small_data,
    ])
    summary = run_training(config)
    assert summary["grpo_steps"] == 1 and summary["skipped_rows"] == 0
    assert summary["n_eval"] == 2 * len(config.data.test)  # eval.limit items of every held-out dataset
