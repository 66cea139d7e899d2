"""``make_dataset``: run a registered recipe and write its train/test dataset folder."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import typing
from pathlib import Path
from typing import Any, Iterator

from data_recipes.generators import GENERATORS, Generator, example_rng
from data_recipes.writer import IdentifiedExample, write_dataset


def recipe_options(recipe: str) -> dict[str, tuple[Any, Any]]:
    """Option name -> (type annotation, default) of a recipe, e.g. ``{"image_size": (int, 112)}``."""
    cls = GENERATORS.get(recipe)
    hints = typing.get_type_hints(cls)
    return {f.name: (hints[f.name], f.default) for f in dataclasses.fields(cls)}


def build_generator(recipe: str, **options: Any) -> Generator:
    """The recipe's generator with ``options``; an unknown option is an error listing the known ones."""
    known = recipe_options(recipe)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"recipe {recipe!r} has no option(s) {', '.join(unknown)}; options: {', '.join(known)}")
    return GENERATORS.get(recipe)(**options)


def generation_identity(recipe: str, **options: Any) -> dict[str, Any]:
    """Everything a generated dataset depends on besides ``n``, seed and split: every option of
    the recipe (defaults included) and a digest of the code that generates and writes it (the
    recipe's module and the shared generator, scene, media and writer modules)."""
    generator = build_generator(recipe, **options)
    names = {type(generator).__module__, *_SHARED_GENERATION_MODULES}
    modules = [importlib.import_module(name) for name in names]
    digest = hashlib.sha1()
    for path in sorted(str(module.__file__) for module in modules):
        digest.update(Path(path).read_bytes())
    return {"recipe": recipe, "options": dataclasses.asdict(generator), "code": digest.hexdigest()[:16]}


_SHARED_GENERATION_MODULES = (
    "data_recipes.generators.base", "data_recipes.generators.scenes", "data_recipes.media", "data_recipes.writer",
    __name__,
)


def _examples(recipe: str, generator: Generator, n: int, n_test: int, seed: int) -> Iterator[IdentifiedExample]:
    """Examples ``0 .. n-1``; the last ``n_test`` form the test split."""
    for index in range(n):
        split = "train" if index < n - n_test else "test"
        yield IdentifiedExample(f"{recipe}-{index:06d}", split, generator.example(example_rng(seed, index)))


def make_dataset(
    recipe: str,
    n: int,
    out_dir: str | Path,
    *,
    seed: int = 0,
    test_fraction: float = 0.2,
    **options: Any,
) -> dict[str, Any]:
    """Generate ``n`` examples of ``recipe`` into ``out_dir``; returns the written dataset info.

    Same recipe, options, ``n`` and ``seed`` -> identical files; an mp4 may come out with other bytes of the same
    frames up to x264's noise (its output is not reproducible across a process's history).
    """
    if n < 1 or not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"need n >= 1 and 0 <= test_fraction < 1, got n={n}, test_fraction={test_fraction}")
    generator = build_generator(recipe, **options)
    n_test = round(n * test_fraction)
    info = {
        "recipe": recipe,
        "task": generator.task,
        "seed": seed,
        "test_fraction": test_fraction,
        "options": dataclasses.asdict(generator),
    }
    return write_dataset(out_dir, _examples(recipe, generator, n, n_test, seed), info)
