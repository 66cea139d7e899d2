"""Benchmark runs: a model (or checkpoint) on one or more tasks and published benchmarks, greedy
and pass@k, with reports.

``evaluate_policy`` scores whatever a rollout engine samples (the trainer calls it on the
live policy); ``run`` loads models, datasets and benchmarks (:mod:`eval.benchmarks`) and writes
``results.json``, ``report.md``, ``samples.jsonl``, a chart and ``report.html`` (``mmgrpo eval``;
:mod:`eval.html_report`); ``score_predictions`` scores saved completions on benchmarks without a model;
``comparison_table`` puts results side by side; :mod:`eval.compare` compares two evaluations item by item.
"""

from eval.benchmark import run, run_config, score_predictions
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
    "score_predictions",
    "write_outputs",
]
