"""``report.html`` of an evaluation: one self-contained page, built from what ``results.json`` and
``samples.jsonl`` hold (so ``mmgrpo report <eval dir>`` can rebuild it at any time).

Sections: a banner per benchmark whose completions often stopped at the token cap; results per
benchmark or dataset (one column per model, intervals as in results.json, the token limit and the
share of completions at it); results per category; the answer distribution (the most frequent
predictions, so a model giving one answer to everything shows at a glance); a sample browser (media
inlined, prompt, gold answer, extracted answer, raw completion, verdict) filtered by model,
benchmark, category and outcome in plain JavaScript. At most ``samples`` items per model and
benchmark are embedded, in file order, to keep the page small.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.report import OUTPUT_FILES
from eval.report_media import MediaSources
from mmgrpo.pagekit.page import fmt, page, with_interval
from mmgrpo.pagekit.svg import COLORS, interval_bars
from mmgrpo.pagekit.thumbnails import media_markup

HTML_FILE = "report.html"
DEFAULT_SAMPLES = 200  # items per model and benchmark embedded in the sample browser
TOP_ANSWERS = 10  # predictions listed per benchmark in the answer distribution
FILTERS = ("model", "task", "category", "outcome")  # card data attributes the browser filters on

STYLE = """
.completion.correct { border-left-color: #55a868; background: #eef7ef; }
.completion.wrong { border-left-color: #c44e52; background: #fbeeee; }
.completion.partial { border-left-color: #dd8452; background: #fdf3ea; }
.prompt { white-space: pre-wrap; }
.answers { display: flex; flex-wrap: wrap; gap: 16px; }
"""

SCRIPT = """
const browser = document.querySelector('#samples');
if (browser) {
  const selects = Array.from(browser.querySelectorAll('select'));
  const filter = () => {
    let shown = 0;
    for (const card of browser.querySelectorAll('.card')) {
      const ok = selects.every(s => s.value === 'all' || JSON.parse(card.dataset[s.name]).includes(s.value));
      card.style.display = ok ? '' : 'none';
      shown += ok ? 1 : 0;
    }
    browser.querySelector('.shown').textContent = shown;
  };
  selects.forEach(s => s.addEventListener('change', filter));
}
"""


def write_html(
    out_dir: str | Path, results_json: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *,
    samples: int = DEFAULT_SAMPLES,
) -> Path:
    """Write ``out_dir/report.html`` from results.json's data and samples.jsonl's rows, atomically."""
    out = Path(out_dir) / HTML_FILE
    staging = out.with_name(out.name + ".tmp")
    staging.write_text(render(results_json, rows, samples=samples), encoding="utf-8")
    staging.replace(out)
    return out


def rebuild(out_dir: str | Path, *, samples: int = DEFAULT_SAMPLES) -> Path:
    """(Re)write ``report.html`` of an evaluation output folder from its results.json and samples.jsonl."""
    folder = Path(out_dir)
    results_path = folder / OUTPUT_FILES["results"]
    if not results_path.is_file():
        raise FileNotFoundError(f"{folder} is not an evaluation output folder: no {OUTPUT_FILES['results']}")
    samples_path = folder / OUTPUT_FILES["samples"]
    lines = samples_path.read_text().splitlines() if samples_path.is_file() else []
    rows = [json.loads(line) for line in lines if line.strip()]
    return write_html(folder, json.loads(results_path.read_text()), rows, samples=samples)


def render(results_json: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *, samples: int = DEFAULT_SAMPLES) -> str:
    """The whole page (see the module docstring)."""
    models: Mapping[str, Any] = results_json.get("models", {})
    tasks = list(dict.fromkeys(task for entry in models.values() for task in entry.get("limits", {})))
    tasks += [task for task in dict.fromkeys(row["task"] for row in rows) if task not in tasks]
    sources = MediaSources(results_json.get("config", {}).get("benchmarks") or ())
    body = [f"<h1>Evaluation report</h1><p>Models: {', '.join(f'<code>{html.escape(n)}</code>' for n in models)}</p>"]
    body += _banners(models)
    body += _results(models, tasks, generated=not results_json.get("config", {}).get("predictions"))
    body += _categories(models, tasks)
    body += _answer_distribution(rows, tasks)
    body += _browser(rows, models, samples, sources)
    return page("Evaluation report: " + ", ".join(models), body, SCRIPT, STYLE)


def outcome(metric: float | None, threshold: float = 1.0) -> str:
    """``correct`` (at least ``threshold``), ``partial`` (some credit), ``wrong``, or ``unscored`` (hidden answer)."""
    if metric is None:
        return "unscored"
    return "correct" if metric >= threshold else "partial" if metric > 0 else "wrong"


def answer_counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Counter[str]]]:
    """Per task, per model: how often each prediction (the first completion's normalised answer) was given."""
    counts: dict[str, dict[str, Counter[str]]] = {}
    for row in rows:
        if row.get("sample_index", 0) == 0:
            counts.setdefault(row["task"], {}).setdefault(row["model"], Counter())[_answer_text(row)] += 1
    return counts


def _banners(models: Mapping[str, Any]) -> list[str]:
    return [f'<div class="alert truncation"><b>{html.escape(name)}:</b> {html.escape(line)}</div>'
            for name, entry in models.items() for line in entry.get("warnings", [])]


def _results(models: Mapping[str, Any], tasks: Sequence[str], *, generated: bool) -> list[str]:
    """Accuracy per benchmark/dataset, one column per model, with the token limit (where completions were
    ``generated``, not saved predictions) and the share at it."""
    header = "".join(f"<th>{html.escape(name)}</th>" for name in models)
    body = []
    for task in tasks:
        limits = [entry["limits"][task] for entry in models.values() if task in entry.get("limits", {})]
        limit = limits[0] if generated and limits else None
        cells = "".join(f"<td>{_accuracy_cell(entry.get('summary', {}), task)}</td>" for entry in models.values())
        body.append(f"<tr><td>{html.escape(task)}</td><td>{fmt(limit) if limit else '-'}</td>{cells}</tr>")
    return ["<h2>Results</h2><p class='muted'>Accuracy (the mean item score) with its interval; n items; the share "
            "of completions that stopped at the token limit.</p>",
            f"<table id='results'><tr><th>benchmark / dataset</th><th>token limit</th>{header}</tr>{''.join(body)}</table>",
            _charts(models, tasks), _all_numbers(models)]


def _charts(models: Mapping[str, Any], tasks: Sequence[str]) -> str:
    """Per model, a bar per benchmark/dataset with a known accuracy, whiskers at its interval."""
    charts = []
    for name, entry in models.items():
        summary = entry.get("summary", {})
        bars = [(task, summary[f"{task}/accuracy"], summary.get(f"{task}/accuracy_ci_low"),
                 summary.get(f"{task}/accuracy_ci_high"), COLORS[index % len(COLORS)])
                for index, task in enumerate(tasks) if summary.get(f"{task}/accuracy") is not None]
        charts.append(interval_bars(name, bars))
    return f"<div class='charts'>{''.join(charts)}</div>"


def _accuracy_cell(summary: Mapping[str, Any], task: str) -> str:
    if f"{task}/n" not in summary:
        return "-"
    truncated = summary.get(f"{task}/truncation_rate")
    at_cap = f" · {truncated:.0%} at the limit" if isinstance(truncated, (int, float)) else ""
    return f"{with_interval(summary, f'{task}/accuracy')}<div class='muted'>n={fmt(summary[f'{task}/n'])}{at_cap}</div>"


def _all_numbers(models: Mapping[str, Any]) -> str:
    """Every summary number of results.json, one column per model, in a collapsed section."""
    summaries = [entry.get("summary", {}) for entry in models.values()]
    keys = dict.fromkeys(k for summary in summaries for k in summary if not k.endswith(("_ci_low", "_ci_high")))
    rows = "".join(f"<tr><td>{html.escape(key)}</td>{''.join(f'<td>{with_interval(s, key)}</td>' for s in summaries)}"
                   "</tr>" for key in keys)
    header = "".join(f"<th>{html.escape(name)}</th>" for name in models)
    return f"<details><summary>All numbers</summary><table><tr><th></th>{header}</tr>{rows}</table></details>"


def _categories(models: Mapping[str, Any], tasks: Sequence[str]) -> list[str]:
    """Per benchmark and category key, accuracy per label: one column per model."""
    parts = []
    header = "".join(f"<th>{html.escape(name)}</th>" for name in models)
    for task in tasks:
        tables = [entry.get("categories", {}).get(task, {}) for entry in models.values()]
        for key in dict.fromkeys(k for table in tables for k in table):
            labels = sorted(dict.fromkeys(label for table in tables for label in table.get(key, {})))
            rows = []
            for label in labels:
                cells = [table.get(key, {}).get(label) for table in tables]
                n = next(cell["n"] for cell in cells if cell)
                rows.append(f"<tr><td>{html.escape(label)}</td><td>{fmt(n)}</td>"
                            + "".join(f"<td>{with_interval(c, 'accuracy') if c else '-'}</td>" for c in cells) + "</tr>")
            parts.append(f"<h3>{html.escape(task)} by {html.escape(key)}</h3>"
                         f"<table><tr><th>{html.escape(key)}</th><th>n</th>{header}</tr>{''.join(rows)}</table>")
    return ["<h2>By category</h2>", *parts] if parts else []


def _answer_distribution(rows: Sequence[Mapping[str, Any]], tasks: Sequence[str]) -> list[str]:
    """Per benchmark and model, the most frequent predictions with their counts and shares."""
    counts = answer_counts(rows)
    parts = ["<h2>Answer distribution</h2><p class='muted'>The most frequent predictions (first completion, as "
             "normalised for scoring) per benchmark and model.</p>"]
    for task in [t for t in tasks if t in counts]:
        tables = []
        for model, counter in counts[task].items():
            total = sum(counter.values())
            top = "".join(f"<tr><td><code>{html.escape(answer)}</code></td><td>{count}</td><td>{count / total:.0%}</td></tr>"
                          for answer, count in counter.most_common(TOP_ANSWERS))
            tables.append(f"<table class='distribution' data-task='{html.escape(task)}'><tr><th colspan='3'>"
                          f"{html.escape(model)}: {len(counter)} distinct of {total}</th></tr>"
                          f"<tr><th>prediction</th><th>count</th><th>share</th></tr>{top}</table>")
        parts.append(f"<h3>{html.escape(task)}</h3><div class='answers'>{''.join(tables)}</div>")
    return parts


def _browser(rows: Sequence[Mapping[str, Any]], models: Mapping[str, Any], cap: int, sources: MediaSources) -> list[str]:
    """The sample cards (at most ``cap`` items per model and benchmark) and their filters."""
    items: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        items.setdefault((row["model"], row["task"], str(row["prompt_id"])), []).append(row)
    shown: Counter[tuple[str, str]] = Counter()
    total: Counter[tuple[str, str]] = Counter()
    picked = []
    for (model, task, _), completions in items.items():
        total[model, task] += 1
        if shown[model, task] < cap:
            shown[model, task] += 1
            picked.append(sorted(completions, key=lambda r: r.get("sample_index", 0)))
    needed: dict[str, dict[str, None]] = {}  # task -> media references of its picked items, in order
    for completions in picked:
        needed.setdefault(completions[0]["task"], {}).update(dict.fromkeys(completions[0].get("media", [])))
    media = {task: sources.sources(task, refs) for task, refs in needed.items()}
    cards = [_card(completions, models.get(completions[0]["model"], {}).get("options", {}).get("correct_threshold", 1.0),
                   media[completions[0]["task"]]) for completions in picked]
    counts = ", ".join(f"{shown[key]} of {total[key]} {html.escape(key[1])} ({html.escape(key[0])})" for key in total)
    values = {name: dict.fromkeys(v for card in cards for v in card[1][name]) for name in FILTERS}
    controls = " ".join(
        f'{name} <select name="{name}"><option value="all">all</option>'
        + "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in values[name]) + "</select>"
        for name in FILTERS)
    return [f"<section id='samples'><h2>Samples</h2><p class='muted'>Shown: {counts or 'none'} (at most {cap} per "
            f"model and benchmark; <code>mmgrpo report DIR --samples N</code> rebuilds with another cap).</p>"
            f"<p>{controls} · <span class='shown'>{len(cards)}</span> shown</p>{''.join(c[0] for c in cards)}</section>"]


def _card(
    completions: Sequence[Mapping[str, Any]], threshold: float, media: Mapping[str, str | bytes],
) -> tuple[str, dict[str, list[str]]]:
    """One item's card (its images drawn from ``media``: reference -> path or bytes) and its filter values
    (model, task, ``task/key=label`` categories, outcome)."""
    first = completions[0]
    task = first["task"]
    labels = [f"{key}={label}" for key, value in first.get("categories", {}).items()
              for label in (value if isinstance(value, list) else [value])]
    filters = {"model": [first["model"]], "task": [task], "category": [f"{task}/{label}" for label in labels],
               "outcome": [outcome(first.get("metric"), threshold)]}
    data = " ".join(f"data-{name}='{html.escape(json.dumps(values), quote=True)}'" for name, values in filters.items())
    thumbnails = "".join(media_markup(ref, source=media.get(ref)) for ref in first.get("media", []))
    lines = "".join(_completion(row, threshold) for row in completions)
    return (f'<div class="card" {data}><div class="head">{thumbnails}<div>'
            f'<div class="muted">{html.escape(first["model"])} · {html.escape(task)} · {html.escape(str(first["prompt_id"]))}'
            f' · {html.escape(", ".join(labels))}</div><div class="prompt">{html.escape(first.get("prompt", ""))}</div>'
            f'<div><b>gold:</b> {fmt(first.get("answer"))}</div></div></div>{lines}</div>', filters)


def _completion(row: Mapping[str, Any], threshold: float) -> str:
    verdict = outcome(row.get("metric"), threshold)
    details = [f"{verdict} (score {fmt(row.get('metric'))})"]
    if "extracted" in row:
        details.append(f"extracted: {fmt(row['extracted'])}")
    details.append(f"prediction: {html.escape(_answer_text(row))}")
    if row.get("note"):
        details.append(html.escape(row["note"]))
    details.append(f"{row.get('n_tokens', 0)} tokens" + (" (stopped at the token limit)" if row.get("truncated") else ""))
    return (f'<div class="completion {verdict}">{html.escape(str(row.get("completion", "")))}'
            f'<div class="muted">{" · ".join(details)}</div></div>')


def _answer_text(row: Mapping[str, Any]) -> str:
    """A prediction as shown and counted: text as it is, anything else as JSON; no prediction as ``(none)``."""
    answer = row.get("parsed_answer")
    return "(none)" if answer in (None, "") else answer if isinstance(answer, str) else json.dumps(answer)
