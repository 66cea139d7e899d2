"""``grounding``: find the one object a referring expression names ("the small red circle").

The answer is its box ``[x1, y1, x2, y2]`` in pixels of the image as written (``x2``/``y2``
exclusive); ``image_size`` (``[width, height]``) says which pixel grid that is, so the task
can rescale to whatever coordinate system the model uses. Distractors never share all three of the
target's attributes (size, colour, shape), so the expression is unambiguous.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from data_recipes.generators.base import GENERATORS, Example, MediaFile, check_range
from data_recipes.generators.scenes import (
    COLOURS,
    DEFAULT_BACKGROUND,
    ObjectSpec,
    SHAPES,
    SceneError,
    check_names,
    check_rgb,
    place,
    png_bytes,
    render,
)


@GENERATORS.register("grounding")
@dataclass(frozen=True)
class Grounding:
    """A target object plus distractors; the question names the target by size, colour and shape."""

    task: ClassVar[str] = "grounding"

    image_size: int = 112
    min_objects: int = 2
    """Objects in the scene, target included."""
    max_objects: int = 5
    small_px: int = 12
    large_px: int = 20
    shapes: tuple[str, ...] = SHAPES
    colours: tuple[str, ...] = tuple(COLOURS)
    background: tuple[int, ...] = DEFAULT_BACKGROUND
    min_gap: int = 2
    margin: int = 1
    """Fewest pixels between any object and the image border (on 128-px images, 13 keeps every
    0-1000 coordinate at three digits, so its first digit always means the same thing)."""

    def __post_init__(self) -> None:
        check_range("objects", self.min_objects, self.max_objects, minimum=1)
        check_names(self.shapes, self.colours)
        check_rgb(self.background)
        if self.small_px >= self.large_px:
            raise SceneError(f"small_px ({self.small_px}) must be below large_px ({self.large_px})")

    def _attribute_choices(self) -> list[ObjectSpec]:
        sizes = {"small": self.small_px, "large": self.large_px}
        return [(s, c, label, sizes[label]) for s, c, label in itertools.product(self.shapes, self.colours, sizes)]

    def example(self, rng: np.random.Generator) -> Example:
        choices = self._attribute_choices()
        target = choices[int(rng.integers(len(choices)))]
        others = [choice for choice in choices if choice != target]
        n = int(rng.integers(self.min_objects, self.max_objects + 1))
        distractors = [others[int(i)] for i in rng.integers(len(others), size=n - 1)]
        objects = place(rng, [target, *distractors], self.image_size, min_gap=self.min_gap, margin=self.margin)
        image = render(objects, self.image_size, tuple(self.background))
        fields = {
            "problem": f"Where is the {objects[0].describe()}?",
            "answer": objects[0].box,
            "image_size": [self.image_size, self.image_size],
            "target": objects[0].as_dict(),
            "objects": [obj.as_dict() for obj in objects],
        }
        return Example(fields, MediaFile("image", ".png", png_bytes(image)))
