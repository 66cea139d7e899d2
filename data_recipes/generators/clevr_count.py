"""``clevr_count``: count shapes in a flat CLEVR-style scene.

Questions are "How many objects are there?" or, with ``attribute_question_prob``, about a
colour and/or shape taken from an object in the scene ("How many red squares are there?"),
so attribute answers are at least 1. The answer is an ``int``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from data_recipes.generators.base import GENERATORS, Example, MediaFile, check_range
from data_recipes.generators.scenes import (
    COLOURS,
    DEFAULT_BACKGROUND,
    PLURALS,
    SHAPES,
    SceneObject,
    check_names,
    check_rgb,
    place,
    png_bytes,
    random_attributes,
    render,
)


@dataclass(frozen=True)
class CountQuery:
    """Which objects to count: those with this colour and/or shape (``None`` = any)."""

    colour: str | None = None
    shape: str | None = None

    def matches(self, obj: SceneObject) -> bool:
        return self.colour in (None, obj.colour) and self.shape in (None, obj.shape)

    def question(self) -> str:
        noun = PLURALS[self.shape] if self.shape else "objects"
        words = " ".join(w for w in (self.colour, noun) if w)
        return f"How many {words} are there?"


def random_query(rng: np.random.Generator, objects: list[SceneObject], attribute_question_prob: float) -> CountQuery:
    """All objects, or (with the given probability) the colour/shape/both of a random object."""
    if rng.random() >= attribute_question_prob:
        return CountQuery()
    reference = objects[int(rng.integers(len(objects)))]
    use_colour, use_shape = [(True, False), (False, True), (True, True)][int(rng.integers(3))]
    return CountQuery(reference.colour if use_colour else None, reference.shape if use_shape else None)


@GENERATORS.register("clevr_count")
@dataclass(frozen=True)
class ClevrCount:
    """Images of 1..N coloured squares/circles/triangles with a "how many" question."""

    task: ClassVar[str] = "clevr_count"

    image_size: int = 112
    """Side of the square image in pixels."""
    min_objects: int = 1
    max_objects: int = 6
    small_px: int = 12
    """Box side of a "small" object in pixels."""
    large_px: int = 16
    """Box side of a "large" object in pixels."""
    shapes: tuple[str, ...] = SHAPES
    colours: tuple[str, ...] = tuple(COLOURS)
    background: tuple[int, ...] = DEFAULT_BACKGROUND
    """RGB background; the default is the image processor's mean colour (a tiny VLM needs it)."""
    attribute_question_prob: float = 0.5
    """Probability of a colour/shape question instead of "How many objects are there?"."""
    allow_overlap: bool = False
    min_gap: int = 2
    """Minimum pixels between two objects when overlap is not allowed."""

    def __post_init__(self) -> None:
        check_range("objects", self.min_objects, self.max_objects, minimum=1)
        check_names(self.shapes, self.colours)
        check_rgb(self.background)

    def example(self, rng: np.random.Generator) -> Example:
        n = int(rng.integers(self.min_objects, self.max_objects + 1))
        sizes = {"small": self.small_px, "large": self.large_px}
        attributes = random_attributes(rng, n, self.shapes, self.colours, sizes)
        objects = place(rng, attributes, self.image_size, allow_overlap=self.allow_overlap, min_gap=self.min_gap)
        query = random_query(rng, objects, self.attribute_question_prob)
        image = render(objects, self.image_size, tuple(self.background))
        fields = {
            "problem": query.question(),
            "answer": sum(query.matches(obj) for obj in objects),
            "count_target": {"colour": query.colour, "shape": query.shape},
            "objects": [obj.as_dict() for obj in objects],
        }
        return Example(fields, MediaFile("image", ".png", png_bytes(image)))
