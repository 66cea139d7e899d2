"""Procedural data recipes: ``GENERATORS`` maps a recipe name to its options dataclass.

Importing this package registers the built-in recipes.
"""

from data_recipes.generators import (  # noqa: F401  (registration)
    arithmetic, audio_count, clevr_count, code_functions, grounding, video_count, zoom_texture,
)
from data_recipes.generators.base import GENERATORS, Example, Generator, MediaFile, example_rng

__all__ = ["GENERATORS", "Example", "Generator", "MediaFile", "example_rng"]
