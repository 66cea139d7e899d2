"""Benchmark runs: a model (or checkpoint) on one or more tasks, greedy and pass@k, with reports.

``evaluate_policy`` scores whatever a rollout engine samples (the trainer calls it on the
live policy); ``run`` loads models and datasets and writes ``results.json``, ``report.md``,
``samples.jsonl`` and a chart (``mmgrpo eval``); ``comparison_table`` puts results side by side.
"""

from eval.benchmark import run, run_config
from eval.report import comparison_table, write_outputs
from eval.results import CompletionRecord, EvalOptions, EvalResult, ItemRecord
from eval.runner import evaluate_policy

__all__ = [
    "CompletionRecord",
    "EvalOptions",
    "EvalResult",
    "ItemRecord",
    "comparison_table",
    "evaluate_policy",
    "run",
    "run_config",
    "write_outputs",
]
