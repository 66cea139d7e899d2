"""Flat 2D scenes of coloured shapes, drawn with PIL, shared by the image and video generators.

A scene is a list of ``SceneObject`` on a plain background. Objects are axis-aligned squares,
circles (discs) or upward triangles inscribed in a ``size x size`` box; placement is by
rejection sampling, non-overlapping (with a gap) unless overlap is explicitly allowed.
Drawing uses no anti-aliasing, so every object is a solid blob of exactly its colour.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw

RGB = tuple[int, int, int]

# Mean colour of the CLIP/Qwen image processors (OPENAI_CLIP_MEAN x 255). Measured: on a white
# background a tiny VLM could not learn to count (features dominated by the background);
# on this one it could (see ENVIRONMENT.md, "Can a tiny VLM really learn counting").
DEFAULT_BACKGROUND: RGB = (123, 117, 104)

# Ten colours far from each other and from DEFAULT_BACKGROUND (no grey, no brown).
COLOURS: dict[str, RGB] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 215, 40),
    "purple": (140, 60, 190),
    "cyan": (40, 205, 215),
    "orange": (245, 140, 25),
    "pink": (245, 130, 190),
    "white": (250, 250, 250),
    "black": (15, 15, 15),
}
PLURALS: dict[str, str] = {"square": "squares", "circle": "circles", "triangle": "triangles"}
ObjectSpec = tuple[str, str, str, int]  # (shape, colour name, size label, box side in px)


def _square(draw: ImageDraw.ImageDraw, x1: int, y1: int, x2: int, y2: int, fill: RGB) -> None:
    draw.rectangle((x1, y1, x2, y2), fill=fill)


def _circle(draw: ImageDraw.ImageDraw, x1: int, y1: int, x2: int, y2: int, fill: RGB) -> None:
    draw.ellipse((x1, y1, x2, y2), fill=fill)


def _triangle(draw: ImageDraw.ImageDraw, x1: int, y1: int, x2: int, y2: int, fill: RGB) -> None:
    draw.polygon([((x1 + x2) / 2, y1), (x1, y2), (x2, y2)], fill=fill)  # apex at the top centre


# shape name -> drawer taking the inclusive pixel box
_DRAWERS = {"square": _square, "circle": _circle, "triangle": _triangle}
SHAPES: tuple[str, ...] = tuple(_DRAWERS)


class SceneError(ValueError):
    """The requested scene cannot be built (e.g. too many objects for the canvas)."""


@dataclass(frozen=True)
class SceneObject:
    """One shape: its kind, colour name, size label and top-left corner of its ``px``-wide box."""

    shape: str
    colour: str
    size: str
    px: int
    x: int
    y: int

    @property
    def box(self) -> list[int]:
        """``[x1, y1, x2, y2]`` in pixels, ``x2``/``y2`` exclusive (the box covers ``px`` pixels)."""
        return [self.x, self.y, self.x + self.px, self.y + self.px]

    def describe(self) -> str:
        """Referring expression, e.g. "small red circle"."""
        return f"{self.size} {self.colour} {self.shape}"

    def as_dict(self) -> dict[str, object]:
        return {"shape": self.shape, "colour": self.colour, "size": self.size, "box": self.box}


def check_names(shapes: Sequence[str], colours: Sequence[str]) -> None:
    """Raise a clear error for an unknown shape or colour name."""
    for shape in shapes:
        if shape not in SHAPES:
            raise SceneError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    for colour in colours:
        if colour not in COLOURS:
            raise SceneError(f"unknown colour {colour!r}; known: {', '.join(COLOURS)}")


def check_rgb(colour: Sequence[int]) -> None:
    """Raise unless ``colour`` is three 0..255 channel values."""
    if len(colour) != 3 or not all(0 <= c <= 255 for c in colour):
        raise SceneError(f"a colour needs three values in 0..255, got {tuple(colour)}")


def random_attributes(
    rng: np.random.Generator,
    n: int,
    shapes: Sequence[str],
    colours: Sequence[str],
    sizes: dict[str, int],
) -> list[ObjectSpec]:
    """``n`` independent ``(shape, colour, size_label, px)`` draws, uniform over each choice."""
    labels = list(sizes)
    return [
        (str(rng.choice(shapes)), str(rng.choice(colours)), label, sizes[label])
        for label in (labels[int(i)] for i in rng.integers(len(labels), size=n))
    ]


def _boxes_clear(box: list[int], others: list[list[int]], gap: int) -> bool:
    """True if ``box`` keeps at least ``gap`` pixels from every box in ``others``."""
    x1, y1, x2, y2 = box
    return all(x2 + gap <= a1 or a2 + gap <= x1 or y2 + gap <= b1 or b2 + gap <= y1 for a1, b1, a2, b2 in others)


def place(
    rng: np.random.Generator,
    attributes: Sequence[ObjectSpec],
    canvas: int,
    *,
    allow_overlap: bool = False,
    min_gap: int = 2,
    margin: int = 1,
    align: int = 1,
    max_tries: int = 200,
    max_layouts: int = 50,
) -> list[SceneObject]:
    """Place ``(shape, colour, size_label, px)`` objects at random positions on a square canvas.

    Without ``allow_overlap`` every pair of boxes is at least ``min_gap`` pixels apart, so each
    object stays a separate connected blob. Corners are multiples of ``align`` (video uses 2 so
    objects cover whole 2x2 chroma blocks and colours do not bleed in yuv420p). An object that
    finds no free spot in ``max_tries`` draws starts the layout over (the first objects may have
    crowded it out), up to ``max_layouts`` times.
    """
    for _ in range(max_layouts):
        objects = _layout(rng, attributes, canvas, allow_overlap, min_gap, margin, align, max_tries)
        if objects is not None:
            return objects
    raise SceneError(
        f"could not place {len(attributes)} objects without overlap on a {canvas}-px canvas "
        f"in {max_layouts} layouts of {max_tries} tries each; use a larger canvas, fewer or smaller objects"
    )


def _layout(
    rng: np.random.Generator, attributes: Sequence[ObjectSpec], canvas: int, allow_overlap: bool, min_gap: int,
    margin: int, align: int, max_tries: int,
) -> list[SceneObject] | None:
    """One attempt at a layout of every object; None when an object found no free spot."""
    objects: list[SceneObject] = []
    for shape, colour, size, px in attributes:
        first, last = -(-margin // align), (canvas - margin - px) // align  # corner range in align steps
        if last < first:
            raise SceneError(f"a {px}-px object does not fit a {canvas}-px canvas")
        for _ in range(max_tries):
            x, y = (int(v) * align for v in rng.integers(first, last + 1, size=2))
            candidate = SceneObject(shape, colour, size, px, x, y)
            if allow_overlap or _boxes_clear(candidate.box, [o.box for o in objects], min_gap):
                objects.append(candidate)
                break
        else:
            return None
    return objects


def draw_object(draw: ImageDraw.ImageDraw, obj: SceneObject) -> None:
    """Draw one solid object inside its box."""
    x1, y1, x2, y2 = obj.box
    _DRAWERS[obj.shape](draw, x1, y1, x2 - 1, y2 - 1, COLOURS[obj.colour])


def render(objects: Sequence[SceneObject], canvas: int, background: RGB = DEFAULT_BACKGROUND) -> Image.Image:
    """An RGB ``canvas x canvas`` image with ``objects`` drawn in order on ``background``."""
    image = Image.new("RGB", (canvas, canvas), tuple(background))
    draw = ImageDraw.Draw(image)
    for obj in objects:
        draw_object(draw, obj)
    return image


def png_bytes(image: Image.Image) -> bytes:
    """Encode as PNG (deterministic: same pixels -> same bytes)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
