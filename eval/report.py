"""Evaluation outputs: ``results.json``, ``report.md``, ``samples.jsonl``, a PNG bar chart and
``report.html`` (built from the first three by :mod:`eval.html_report`).

One model or several side by side: every writer takes ``{model name: EvalResult}``, and
the Markdown table has one column per model (rows = tasks and metrics, cells with their
confidence intervals).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eval.results import EvalResult

OUTPUT_FILES = {"results": "results.json", "report": "report.md", "samples": "samples.jsonl", "chart": "accuracy.png"}
CI_SUFFIXES = ("_ci_low", "_ci_high")
OVERALL_LABEL = "all tasks"  # chart group of the overall accuracy (drawn when there are several tasks)


def write_outputs(
    out_dir: str | Path, results: Mapping[str, EvalResult], *, config: Mapping[str, Any] | None = None,
    html_samples: int | None = None,
) -> dict[str, Path]:
    """Write the outputs for ``results`` (model name -> result) into ``out_dir``; returns their paths.
    ``html_samples``: items per model and benchmark report.html embeds (None: its default)."""
    # Imported here: eval.html_report reads OUTPUT_FILES from this module.
    from eval.html_report import DEFAULT_SAMPLES, write_html

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / file for kind, file in OUTPUT_FILES.items()}
    results_json = nan_to_null({"config": dict(config or {}), "models": {name: model_entry(r) for name, r in results.items()}})
    paths["results"].write_text(json.dumps(results_json, indent=2, default=str, allow_nan=False))
    rows = [json.loads(json.dumps(row, default=str)) for name, result in results.items() for row in sample_rows(name, result)]
    paths["samples"].write_text("".join(json.dumps(row) + "\n" for row in rows))
    plot_comparison(results, paths["chart"])
    paths["report"].write_text(markdown_report(results, chart=paths["chart"].name))
    plain = json.loads(json.dumps(results_json, default=str))  # as the file holds it, so a rebuild is the same page
    paths["html"] = write_html(out, plain, rows,
                               samples=DEFAULT_SAMPLES if html_samples is None else html_samples)
    return paths


def model_entry(result: EvalResult) -> dict[str, Any]:
    """One model's block in results.json: numbers, options, datasets, skipped rows, timings."""
    return {
        "summary": result.summary(),
        "options": dataclasses.asdict(result.options),
        "datasets": result.datasets(),
        "skipped": {
            "count": len(result.skipped),
            "by_reason": result.skipped_by_reason(),
            "rows": [dataclasses.asdict(row) for row in result.skipped],
        },
        "timings": result.timings,
        "limits": {task: result.limit_of(task) for task in result.tasks()},
        "categories": result.by_category(),
        "warnings": result.truncation_warnings(),
    }


def sample_rows(model_name: str, result: EvalResult) -> Iterator[dict[str, Any]]:
    """One samples.jsonl row per completion: prompt id and text, media, completion, parsed answer, rewards."""
    for item in result.items:
        for index, completion in enumerate(item.completions):
            yield {
                "model": model_name,
                "task": item.task,
                "prompt_id": item.sample_id,
                "sample_index": index,
                "prompt": item.prompt,
                "media": item.media,
                "answer": item.answer,
                "completion": completion.text,
                "parsed_answer": completion.parsed_answer,
                **({"extracted": completion.extracted} if completion.extracted is not None else {}),
                **({"note": completion.note} if completion.note else {}),
                **({"categories": item.categories} if item.categories else {}),
                "metric": nan_to_null(completion.metric),  # null: a hidden answer
                "rewards": completion.rewards,
                "reward": completion.reward,
                "n_tokens": completion.n_tokens,
                "truncated": completion.truncated,
            }


def comparison_table(results: Mapping[str, EvalResult]) -> str:
    """Markdown table: one row per summary number, one column per model, means with CIs."""
    summaries = {name: result.summary() for name, result in results.items()}
    keys = dict.fromkeys(
        key for summary in summaries.values() for key in summary if not key.endswith(CI_SUFFIXES)
    )
    lines = [
        "| metric | " + " | ".join(summaries) + " |",
        "|---|" + "---|" * len(summaries),
    ]
    lines += [
        f"| {key} | " + " | ".join(_cell(summary, key) for summary in summaries.values()) + " |" for key in keys
    ]
    return "\n".join(lines)


def markdown_report(results: Mapping[str, EvalResult], *, chart: str = OUTPUT_FILES["chart"]) -> str:
    """The report.md text: options, the comparison table, the chart, datasets, skipped rows, timings."""
    options = next(iter(results.values())).options
    decoding = "greedy" if options.temperature == 0 else f"temperature {options.temperature}"
    lines = [
        "# Evaluation report",
        "",
        f"Models: {', '.join(f'`{name}`' for name in results)}.",
        (
            f"Decoding: {decoding}, {options.samples} completion(s) per item, "
            f"at most {options.max_new_tokens} new tokens, seed {options.seed}."
        ),
        *token_limit_lines(results),
        f"Intervals: {options.confidence:.0%} (Wilson for 0/1 scores, percentile bootstrap otherwise).",
        "",
        "## Results",
        "",
        comparison_table(results),
        "",
        f"![accuracy by task]({chart})",
        "",
        "Samples, answer distributions and filters: [report.html](report.html).",
        "",
        *warning_lines(results),
        *category_sections(results),
        "## Datasets and skipped rows",
        "",
        "| model | task | items | fingerprint |",
        "|---|---|---|---|",
    ]
    for name, result in results.items():
        lines += [
            f"| {name} | {task} | {info['items']} | `{info['fingerprint']}` |" for task, info in result.datasets().items()
        ]
    lines += ["", "| model | skipped | reasons | seconds |", "|---|---|---|---|"]
    for name, result in results.items():
        reasons = ", ".join(f"{count} {reason}" for reason, count in result.skipped_by_reason().items()) or "-"
        seconds = result.timings.get("total_seconds", math.nan)
        lines.append(f"| {name} | {len(result.skipped)} | {reasons} | {seconds:.1f} |")
    return "\n".join(lines) + "\n"


def token_limit_lines(results: Mapping[str, EvalResult]) -> list[str]:
    """A line naming each benchmark's own token limit, where one was generated under its own."""
    limits = {task: limit for result in results.values() for task, limit in result.limits.items()}
    return [f"Token limits: {', '.join(f'{task} {limit}' for task, limit in limits.items())}."] if limits else []


def warning_lines(results: Mapping[str, EvalResult]) -> list[str]:
    """A "Warnings" section listing every task or benchmark whose completions often hit the token cap."""
    lines = [f"- {name}: {line}" for name, result in results.items() for line in result.truncation_warnings()]
    return ["## Warnings", "", *lines, ""] if lines else []


def category_sections(results: Mapping[str, EvalResult]) -> list[str]:
    """Per benchmark and category key, a table of accuracy per label: one column per model."""
    tables = {name: result.by_category() for name, result in results.items()}
    lines: list[str] = []
    for task in dict.fromkeys(task for table in tables.values() for task in table):
        lines += [f"## {task} by category", ""]
        keys = dict.fromkeys(key for table in tables.values() for key in table.get(task, {}))
        for key in keys:
            labels = dict.fromkeys(label for table in tables.values() for label in table.get(task, {}).get(key, {}))
            lines += [f"| {key} | n | " + " | ".join(tables) + " |", "|---|---|" + "---|" * len(tables)]
            for label in sorted(labels):
                cells = [table.get(task, {}).get(key, {}).get(label) for table in tables.values()]
                n = next(int(cell["n"]) for cell in cells if cell)
                lines.append(f"| {label} | {n} | " + " | ".join(_cell(c, "accuracy") if c else "-" for c in cells) + " |")
            lines.append("")
    return lines


def plot_comparison(results: Mapping[str, EvalResult], path: Path) -> Path:
    """Grouped bar chart of accuracy per task (and overall), one bar per model, CI error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    summaries = {name: result.summary() for name, result in results.items()}
    tasks = list(dict.fromkeys(task for result in results.values() for task in result.tasks()))
    groups = [(task, f"{task}/accuracy") for task in tasks]
    if len(tasks) != 1:
        groups.insert(0, (OVERALL_LABEL, "accuracy"))
    positions = np.arange(len(groups))  # [G]
    width = 0.8 / len(summaries)
    figure, axis = plt.subplots(figsize=(max(4.0, 1.5 * len(groups) * len(summaries)), 3.5))
    for index, (name, summary) in enumerate(summaries.items()):
        values = np.array([summary.get(key, math.nan) for _, key in groups])  # [G]
        lows = np.array([summary.get(f"{key}_ci_low", math.nan) for _, key in groups])
        highs = np.array([summary.get(f"{key}_ci_high", math.nan) for _, key in groups])
        errors = np.clip(np.nan_to_num(np.stack([values - lows, highs - values])), 0, None)  # [2, G]
        axis.bar(positions + index * width, values, width, yerr=errors, capsize=3, label=name)
    axis.set_xticks(positions + width * (len(summaries) - 1) / 2, [label for label, _ in groups])
    axis.set_ylim(0, 1.05)
    axis.set_ylabel("accuracy")
    axis.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.15))  # below: names can be long paths
    axis.grid(axis="y", alpha=0.3)
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
    return path


def _cell(summary: Mapping[str, float], key: str) -> str:
    if key not in summary:
        return "-"
    value = summary[key]
    if isinstance(value, int):
        return str(value)
    low, high = summary.get(f"{key}_ci_low"), summary.get(f"{key}_ci_high")
    if low is None or high is None:
        return f"{value:.3g}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def nan_to_null(value: Any) -> Any:
    """``value`` with NaN (e.g. the mean of an empty task) as None, so results.json is strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: nan_to_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [nan_to_null(item) for item in value]
    return value
