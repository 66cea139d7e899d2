"""Published benchmarks read from their own files and scored by their own rules (see docs/benchmarks.md).

A benchmark is one module here plus one registry line per split; importing this package registers
the built-in ones.
"""

from eval.benchmarks import ai2d, mathvista, mmmu, mmstar, scienceqa  # noqa: F401  (registration)
from eval.benchmarks.base import BENCHMARKS, Benchmark, Item, PromptStyle, Verdict

__all__ = ["BENCHMARKS", "Benchmark", "Item", "PromptStyle", "Verdict"]
