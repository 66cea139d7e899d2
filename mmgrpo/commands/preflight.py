"""Check what a config names against the world, before any heavy work.

:func:`~mmgrpo.config.validation.validate_config` checks a config on its own (bounds,
cross-field rules, and loads the plugins). ``preflight`` checks what it points at: reward and
task names are registered (the plugins are loaded by then), dataset paths,
media roots and model paths exist (or are Hub ids), dataset adapters and data recipes
are registered. Every command runs it right after loading its config, so a typo fails in
about a second with one line per problem, not after data generation, SFT and the first
eval. It imports tasks and data recipes only, no torch: model code only to check a
``tiny:<family>`` other than the default.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from mmgrpo.config.errors import ConfigError, did_you_mean
from mmgrpo.config.validation import at_default, value_of

if TYPE_CHECKING:
    from mmgrpo.config.schema import Config, DatasetConfig

DATASET_KEYS = ("data.train", "data.test", "sft.data")
TINY_PREFIX = "tiny:"
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as the Hub and data_recipes.reading take it


def preflight(config: Config, *, datasets: Sequence[str] = DATASET_KEYS, check_model: bool = True) -> None:
    """Raise ``ConfigError`` listing every problem :func:`preflight_problems` finds."""
    problems = preflight_problems(config, datasets=datasets, check_model=check_model)
    if problems:
        raise ConfigError.listing("config names things that do not exist", problems)


def preflight_problems(
    config: Config, *, datasets: Sequence[str] = DATASET_KEYS, check_model: bool = True
) -> list[str]:
    """Every problem with the plugins, reward names, datasets (the lists in ``datasets``, the
    ones a command uses) and model (unless ``check_model`` is False) that ``config`` names."""
    problems = list(_reward_models(config))
    if not problems:
        problems += _reward_names(config)
    for key in datasets:
        for index, spec in enumerate(value_of(config, key)):
            problems += _dataset(spec, f"{key}[{index}]")
    problems += _task_settings(config, datasets)
    # The default model is known good (a test checks): checking it would import model code.
    if check_model and not at_default(config, "model.name_or_path"):
        if problem := model_problem(config.model.name_or_path):
            problems.append(f"model.name_or_path: {problem}")
    return problems


def model_problem(name_or_path: str) -> str | None:
    """Why ``name_or_path`` cannot name a model (None if it can): an existing folder, a Hub id
    ``owner/name``, or ``tiny:<family>`` of a registered tiny family (this imports model code)."""
    if not name_or_path.startswith(TINY_PREFIX):
        return _local_or_hub(name_or_path, "model")
    from mmgrpo.models.tiny import TINY_FAMILIES

    family, known = name_or_path[len(TINY_PREFIX) :], TINY_FAMILIES.names()
    if family not in known:
        return f"unknown tiny model family {family!r}.{did_you_mean(family, known)} Known: {', '.join(known)}"
    return None


def _reward_models(config: Config) -> Iterator[str]:
    """Each reward model's checkpoint exists; its name becomes a known reward (nothing is loaded)."""
    from mmgrpo.models.value_head import missing_value_head
    from mmgrpo.reward_models import register_reward_models

    for index, entry in enumerate(config.task.reward_models):
        if problem := _local_or_hub(entry.path, "reward model"):
            yield f"task.reward_models[{index}].path: {problem}"
        elif entry.kind == "classifier" and (problem := missing_value_head(entry.path)):
            yield f"task.reward_models[{index}].path: {problem}"
        try:
            register_reward_models([entry])
        except ValueError as error:
            yield f"task.reward_models[{index}]: {error}"


def _reward_names(config: Config) -> Iterator[str]:
    from tasks import REWARDS

    for name in config.task.rewards:
        if name not in REWARDS:
            hint = did_you_mean(name, REWARDS.names())
            yield (f"task.rewards: unknown reward {name!r}.{hint} Known: {', '.join(REWARDS.names())} "
                   "(a reward of your own: add its file or module to task.plugins)")


def _task_settings(config: Config, datasets: Sequence[str]) -> Iterator[str]:
    """``task.options`` every task of the run takes, and ``task.guards`` fields that exist."""
    from tasks import TASKS
    from tasks.guards import Guards

    names = {config.task.name} | {spec.task for key in datasets for spec in value_of(config, key) if spec.task}
    for name in sorted(names & set(TASKS.names())):
        unknown = sorted(set(config.task.options) - TASKS.get(name).option_names())
        if unknown:
            yield f"task.options: task {name!r} has no option(s) {unknown}; its options: {sorted(TASKS.get(name).option_names())}"
    try:
        Guards.coerce(config.task.guards or None)
    except (TypeError, ValueError) as error:
        yield f"task.guards: {error}"


def _dataset(spec: DatasetConfig, key: str) -> Iterator[str]:
    from data_recipes.adapters import ADAPTERS
    from data_recipes.generators import GENERATORS
    from tasks import TASKS

    checks = [
        ("task", spec.task, TASKS),
        ("adapter", spec.adapter, ADAPTERS),
        ("recipe", spec.recipe, GENERATORS),
    ]
    for field, name, registry in checks:
        if name is not None and name not in registry:
            hint = did_you_mean(name, registry.names())
            yield f"{key}.{field}: unknown {registry.kind} {name!r}.{hint} Known: {', '.join(registry.names())}"
    if spec.path is not None and (problem := _local_or_hub(spec.path, "dataset")):
        yield f"{key}.path: {problem}"
    if spec.media_root is not None and not Path(spec.media_root).expanduser().is_dir():
        yield f"{key}.media_root: {spec.media_root!r} is not a folder"


def _local_or_hub(source: str, what: str) -> str | None:
    """None when ``source`` exists locally or has the form of a Hub id; else why not."""
    if Path(source).expanduser().exists() or HUB_ID.fullmatch(source):
        return None
    return f"{what} {source!r} not found: not a local file or folder, nor a Hub id (owner/name)"
