"""Published benchmarks read from their own files and scored by their own rules (see docs/benchmarks.md).

A benchmark is one module here plus one registry line per split; importing this package registers
the built-in ones.
"""

from eval.benchmarks import (  # noqa: F401  (registration)
    ai2d,
    chartqa,
    clevr,
    countbench,
    docvqa,
    mathvista,
    mme,
    mmmu,
    mmstar,
    mvbench,
    pope,
    refcoco,
    scienceqa,
    superclevr,
    textvqa,
    videomme,
)
from eval.benchmarks.base import BENCHMARKS, Benchmark, Item, PromptStyle, Verdict

__all__ = ["BENCHMARKS", "Benchmark", "Item", "PromptStyle", "Verdict"]
