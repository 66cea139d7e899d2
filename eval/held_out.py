"""The numbers of a held-out evaluation during training: ``data.test``'s summary beside each benchmark's own."""

from __future__ import annotations

from eval.results import EvalResult

STAGES = ("before GRPO", "after GRPO")  # a run's evaluations of data.test, by stage


def benchmarks_tag(stage: str) -> str:
    """Where a run keeps the benchmarks of evaluation ``stage`` ("benchmarks before GRPO"), beside data.test's."""
    return f"benchmarks {stage}"


def held_out_numbers(test: EvalResult, benchmarks: EvalResult | None = None) -> dict[str, float]:
    """``test``'s summary (its overall numbers stay ``data.test``'s alone) plus, per benchmark of ``benchmarks``,
    its ``<benchmark>/...`` numbers and ``<benchmark>/<category key>/<label>/accuracy`` per category."""
    numbers = test.summary()
    if benchmarks is None:
        return numbers
    summary = benchmarks.summary()
    for name in benchmarks.tasks():
        numbers |= {key: value for key, value in summary.items() if key.startswith(f"{name}/")}
    for name, keys in benchmarks.by_category().items():
        for key, labels in keys.items():
            numbers |= {f"{name}/{key}/{label}/accuracy": cell["accuracy"] for label, cell in labels.items()}
    return numbers
