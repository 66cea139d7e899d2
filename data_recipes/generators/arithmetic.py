"""``arithmetic``: short multi-step word problems with small whole numbers (text only, no media).

"Ann has 3 apples. Ann gets 4 more. Ann gives away 2. How many apples does Ann have?" -> 5.
A problem starts from a number and applies ``min_steps..max_steps`` additions or
subtractions; every intermediate total stays within ``0..max_answer``, so answers have a
small, known range (a tiny model can learn them) and the question never goes negative.
The answer is computed here and stored with its operands (``start``, ``steps``), so a test
can recompute it or parse it back from the text. Rows go to the ``math`` task.

Curriculum: ``min_steps``/``max_steps`` set how many operations a problem has (1 = one
addition or subtraction); a recipe can mix datasets of growing step counts by weight.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from data_recipes.generators.base import GENERATORS, Example, check_range

OPERATIONS = ("add", "subtract")
# How each operation reads in the problem; ``{n}`` is its amount and ``{name}`` the person.
STEP_PHRASES = {"add": "{name} gets {n} more.", "subtract": "{name} gives away {n}."}
NAMES = ("Ann", "Ben", "Sam", "Mia")
ITEMS = ("apples", "pens", "cards", "coins")


def apply_step(total: int, operation: str, amount: int) -> int:
    """``total`` after one operation."""
    return total + amount if operation == "add" else total - amount


def problem_text(name: str, item: str, start: int, steps: list[tuple[str, int]]) -> str:
    """The word problem for a start amount and its (operation, amount) steps."""
    sentences = [f"{name} has {start} {item}."]
    sentences += [STEP_PHRASES[operation].format(name=name, n=amount) for operation, amount in steps]
    sentences.append(f"How many {item} does {name} have?")
    return " ".join(sentences)


@GENERATORS.register("arithmetic")
@dataclass(frozen=True)
class Arithmetic:
    """Word problems of 1..N additions/subtractions of small amounts; the answer is an ``int``."""

    task: ClassVar[str] = "math"

    min_steps: int = 1
    max_steps: int = 3
    """Operations per problem (the curriculum knob: 1 is a single addition or subtraction)."""
    max_start: int = 9
    """The amount the person starts with is drawn from 0..max_start."""
    min_amount: int = 1
    max_amount: int = 5
    """Each operation adds or removes min_amount..max_amount."""
    max_answer: int = 20
    """Every total, the answer included, stays in 0..max_answer."""
    operations: tuple[str, ...] = OPERATIONS
    names: tuple[str, ...] = NAMES
    items: tuple[str, ...] = ITEMS
    """Plural nouns of the things counted."""

    def __post_init__(self) -> None:
        check_range("steps", self.min_steps, self.max_steps, minimum=1)
        check_range("amount", self.min_amount, self.max_amount, minimum=1)
        if not 0 <= self.max_start <= self.max_answer:
            raise ValueError(f"need 0 <= max_start <= max_answer, got {self.max_start} and {self.max_answer}")
        unknown = sorted(set(self.operations) - set(OPERATIONS))
        if unknown or not self.operations:
            raise ValueError(f"operations must be a non-empty subset of {OPERATIONS}, got {list(self.operations)}")
        if not self.names or not self.items:
            raise ValueError("names and items must not be empty")
        if not self.starts(self.max_steps):
            raise ValueError(
                f"no start in 0..{self.max_start} allows {self.max_steps} steps within 0..{self.max_answer}; "
                "raise max_answer or allow both operations"
            )

    def starts(self, n_steps: int) -> list[int]:
        """Start amounts from which ``n_steps`` operations can stay within 0..max_answer."""
        return [start for start in range(self.max_start + 1) if can_continue(self, start, n_steps)]

    def possible_steps(self, total: int, remaining: int = 1) -> list[tuple[str, int]]:
        """Every (operation, amount) from ``total`` after which ``remaining - 1`` more steps stay in 0..max_answer."""
        return [
            (operation, amount)
            for operation in self.operations
            for amount in range(self.min_amount, self.max_amount + 1)
            if can_continue(self, apply_step(total, operation, amount), remaining - 1)
        ]

    def example(self, rng: np.random.Generator) -> Example:
        n_steps = int(rng.integers(self.min_steps, self.max_steps + 1))
        starts = self.starts(n_steps)  # never empty: checked for max_steps, and fewer steps are easier
        total = start = starts[int(rng.integers(len(starts)))]
        steps: list[tuple[str, int]] = []
        for remaining in range(n_steps, 0, -1):
            choices = self.possible_steps(total, remaining)
            operation, amount = choices[int(rng.integers(len(choices)))]
            total = apply_step(total, operation, amount)
            steps.append((operation, amount))
        name = self.names[int(rng.integers(len(self.names)))]
        item = self.items[int(rng.integers(len(self.items)))]
        fields = {
            "problem": problem_text(name, item, start, steps),
            "answer": total,
            "start": start,
            "steps": [{"operation": operation, "amount": amount} for operation, amount in steps],
        }
        return Example(fields)


@functools.cache
def can_continue(recipe: Arithmetic, total: int, remaining: int) -> bool:
    """Whether ``total`` is in range and ``remaining`` more steps can follow within 0..max_answer."""
    if not 0 <= total <= recipe.max_answer:
        return False
    return remaining == 0 or bool(recipe.possible_steps(total, remaining))
