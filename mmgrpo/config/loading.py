"""Build a config from layers: dataclass defaults <- a YAML recipe <- dotted overrides.

A recipe is a YAML file given by path, or by name from the repository's ``recipes/``
folder (``load_config("default")``). An override is ``dotted.key=value``; the value is
read with YAML rules (``0.04``, ``true``, ``[q_proj, v_proj]``, ``{format: 0.5}``,
``null``) and then checked against the field's type. List items are addressed by
index (``data.train.0.limit=100``); keys of a mapping field are free
(``task.rewards.format=0.5``). Each layer is checked as it is applied, so an error
names the file or the override it came from.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Sequence

import yaml

from mmgrpo.config.errors import ConfigError, did_you_mean
from mmgrpo.config.schema import Config

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"


def load_config(recipe: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """The validated config of ``recipe`` (a YAML path or a recipe name; None = defaults) plus ``overrides``."""
    tree = Config().to_dict()
    if recipe is not None:
        source = resolve_recipe(recipe)
        tree = _checked(deep_merge(tree, read_yaml(source)), str(source))
    return apply_overrides(tree, overrides).validate()


def apply_overrides(base: Config | dict[str, Any], overrides: Sequence[str]) -> Config:
    """``base`` with each ``key=value`` of ``overrides`` applied in order (not validated)."""
    tree = base.to_dict() if isinstance(base, Config) else copy.deepcopy(base)
    for override in overrides:
        key, value = parse_override(override)
        set_dotted(tree, key, value, override)
        _checked(tree, f"override {override!r}")
    return Config.from_dict(tree)


def parse_override(override: str) -> tuple[str, Any]:
    """``"algo.beta=0.04"`` -> ``("algo.beta", 0.04)``, the value read with YAML scalar rules."""
    key, sep, text = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {override!r} must look like dotted.key=value, e.g. algo.beta=0.04")
    try:
        return key, yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"override {override!r}: the value is not valid YAML ({error})") from None


def set_dotted(tree: dict[str, Any], key: str, value: Any, source: str) -> None:
    """Set ``tree[a][b]... = value`` for ``key`` "a.b..."; missing mappings are created.

    A created mapping under an unknown name is rejected when the tree is built.
    """
    *parents, last = key.split(".")
    node: Any = tree
    for depth, part in enumerate(parents):
        slot = _slot(node, part, parents[:depth], source)
        if isinstance(node, dict):
            node.setdefault(slot, {})
        node = node[slot]
    node[_slot(node, last, parents, source)] = value


def _slot(node: Any, part: str, path: list[str], source: str) -> str | int:
    """What ``part`` addresses inside ``node`` (the container at ``path``): a mapping key or a list index."""
    if isinstance(node, dict):
        return part
    where = ".".join(path)
    if not isinstance(node, list):
        raise ConfigError(f"override {source!r}: {where!r} is a value, not a section")
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"override {source!r}: {part!r} after {where!r} must be a list index below {len(node)}")
    return int(part)


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``update`` merged in: mappings merge key by key, anything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(merged.get(key), dict) and isinstance(value, dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping in YAML file ``path`` (an empty file is an empty mapping)."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({error})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config sections at the top level, got {type(data).__name__}")
    return data


def resolve_recipe(recipe: str | Path) -> Path:
    """The YAML file for ``recipe``: an existing path, else ``recipes/<recipe>.yaml``."""
    path = Path(recipe)
    if path.is_file():
        return path
    named = RECIPES_DIR / f"{recipe}.yaml"
    if named.is_file():
        return named
    known = list_recipes()
    raise ConfigError(
        f"no config file or recipe named {str(recipe)!r}.{did_you_mean(str(recipe), known)} "
        f"Recipes in {RECIPES_DIR}: {', '.join(known) or '(none)'}"
    )


def list_recipes() -> list[str]:
    """Names of the recipes in the repository's ``recipes/`` folder."""
    return sorted(path.stem for path in RECIPES_DIR.glob("*.yaml"))


def _checked(tree: dict[str, Any], source: str) -> dict[str, Any]:
    """``tree`` unchanged if it builds into a ``Config``; else the build error prefixed by ``source``."""
    try:
        Config.from_dict(tree)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    return tree
