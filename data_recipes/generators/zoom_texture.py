"""``zoom_texture``: four quadrants of fine texture; which texture fills the one the question names?

Each quadrant holds one of :data:`TEXTURES`, black and white alternating every ``stripe_px`` pixels: across
(``horizontal``), down (``vertical``) or both (``checks``), fading into mid grey over ``fade_px`` pixels at the
quadrant's edges, under Gaussian noise of ``noise_std`` grey levels (every image its own). Every texture is half
black, so an image shrunk by twice the stripe width or more (what the model sees of it at a 4x smaller pixel
budget) shows four equally grey, noisy squares: the answer is in the image, but only a zoom into the quadrant shows
it (``zoom_in``). Without the noise that would not hold: the shrunk textures differ by 1-2 grey levels in a fixed
pattern (the resampling's rounding near edges), which a linear probe reads perfectly; with it a probe on the
shrunk quadrant is at chance (tested). The row names its quadrant's box in pixels of the image as written
(``region``) for the task's demonstrations and metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from PIL import Image

from data_recipes.generators.base import GENERATORS, Example, MediaFile
from data_recipes.generators.scenes import SceneError, png_bytes

TEXTURES = ("horizontal", "vertical", "checks")
QUADRANTS = ("top-left", "top-right", "bottom-left", "bottom-right")


def texture(name: str, size: int, stripe_px: int, fade_px: int) -> np.ndarray:
    """A ``size`` x ``size`` float square of the texture ``name`` (grey levels), black and white at its centre,
    fading to mid grey over its outer ``fade_px`` pixels."""
    rows, columns = np.indices((size, size)) // stripe_px
    pattern = {"horizontal": rows % 2, "vertical": columns % 2, "checks": (rows + columns) % 2}[name]
    to_edge = np.minimum(np.arange(size), np.arange(size)[::-1])  # [size]
    amplitude = np.clip((np.minimum.outer(to_edge, to_edge) + 0.5) / max(fade_px, 1), 0, 1) if fade_px else 1.0
    return 127.5 + amplitude * (pattern * 255 - 127.5)


def quadrant_box(quadrant: str, image_size: int) -> list[int]:
    """The quadrant's box ``[x1, y1, x2, y2]`` in pixels (``x2``/``y2`` exclusive)."""
    half = image_size // 2
    row, column = divmod(QUADRANTS.index(quadrant), 2)
    return [column * half, row * half, (column + 1) * half, (row + 1) * half]


@GENERATORS.register("zoom_texture")
@dataclass(frozen=True)
class ZoomTexture:
    """A ``image_size`` square image of four textured quadrants and a question about one of them."""

    task: ClassVar[str] = "zoom_texture"

    image_size: int = 224
    """At the tiny models' default budget (112 x 112 pixels) the image is shrunk 2x, a zoomed quadrant not at all."""
    stripe_px: int = 1
    fade_px: int = 16
    noise_std: float = 48.0
    """Grey levels of the per-pixel noise that hides what shrinking leaves of the textures (and makes each image its
    own: without it there are only 3**4 images)."""

    def __post_init__(self) -> None:
        if self.stripe_px < 1 or self.image_size % (4 * self.stripe_px):
            raise SceneError(f"image_size ({self.image_size}) must be a multiple of 4 x stripe_px ({self.stripe_px})")
        if not 0 <= 2 * self.fade_px < self.image_size // 2:
            raise SceneError(f"fade_px ({self.fade_px}) must leave each quadrant's centre unfaded")
        if self.noise_std < 0:
            raise SceneError(f"noise_std must be >= 0, got {self.noise_std}")

    def example(self, rng: np.random.Generator) -> Example:
        textures = [TEXTURES[int(i)] for i in rng.integers(len(TEXTURES), size=len(QUADRANTS))]
        quadrant = QUADRANTS[int(rng.integers(len(QUADRANTS)))]
        half = self.image_size // 2
        pixels = rng.normal(0.0, self.noise_std, (self.image_size, self.image_size))
        for name, place in zip(textures, QUADRANTS):
            x1, y1, _, _ = quadrant_box(place, self.image_size)
            pixels[y1 : y1 + half, x1 : x1 + half] += texture(name, half, self.stripe_px, self.fade_px)
        pixels = np.clip(np.round(pixels), 0, 255).astype(np.uint8)
        fields = {
            "problem": f"Which texture fills the {quadrant} quadrant: horizontal, vertical or checks?",
            "answer": textures[QUADRANTS.index(quadrant)],
            "quadrant": quadrant,
            "region": quadrant_box(quadrant, self.image_size),
            "image_size": [self.image_size, self.image_size],
            "textures": dict(zip(QUADRANTS, textures)),
        }
        return Example(fields, MediaFile("image", ".png", png_bytes(Image.fromarray(pixels).convert("RGB"))))
