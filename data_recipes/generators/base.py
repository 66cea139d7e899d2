"""What a procedural data recipe is: a typed set of options that turns a seeded RNG into one example.

A recipe is a frozen dataclass registered in ``GENERATORS``; its fields are its options (the
``mmgrpo data make`` flags are derived from them) and ``example(rng)`` draws one example.
Examples are independent: example ``i`` of seed ``s`` uses ``example_rng(s, i)``, so it does
not depend on how many examples are drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from mmgrpo.registry import Registry


@dataclass(frozen=True)
class MediaFile:
    """An encoded media file of an example: the canonical column it fills and its bytes."""

    column: str  # "image", "video" or "audio"
    suffix: str  # file extension, e.g. ".png"
    data: bytes


@dataclass(frozen=True)
class Example:
    """One generated example: canonical fields (no ``id``, no media paths yet) and its media file, if any."""

    fields: dict[str, Any]
    media: MediaFile | None = None
    """None for a text-only example (e.g. a word problem)."""


class Generator(Protocol):
    """A recipe instance: options as dataclass fields, ``task`` names the task that consumes it."""

    task: ClassVar[str]

    def example(self, rng: np.random.Generator) -> Example: ...


GENERATORS: Registry[type[Generator]] = Registry("data recipe")


def example_rng(seed: int, index: int) -> np.random.Generator:
    """The RNG of example ``index`` under ``seed`` (independent streams, order-free)."""
    return np.random.default_rng([seed, index])


def check_range(name: str, low: int, high: int, minimum: int = 0) -> None:
    """Validate an inclusive ``[low, high]`` option range, naming the options in the error."""
    if not minimum <= low <= high:
        raise ValueError(f"need {minimum} <= min_{name} <= max_{name}, got {low} and {high}")
