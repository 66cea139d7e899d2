"""``report.html``: one self-contained page for one run, or several runs side by side.

Sections: alerts, summary (with the held-out accuracy before/after and its interval), config
changes against the defaults, training curves (raw and smoothed; runs overlaid), the sample
gallery (media, prompt, answer, the group's completions with reward components and advantages,
best and worst marked; filters by step and correctness), and the evaluations (per task, and the
held-out answers that changed). Media are inlined, so the file can be mailed or archived alone.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mmgrpo.config.run_sections import AlertsConfig
from mmgrpo.reports.alerts import config_alerts, find_alerts
from mmgrpo.reports.curves import PANELS, ema, panel_keys, series, smoothing_weight
from mmgrpo.reports.gallery import GalleryGroup, changed_answers, gallery_groups
from mmgrpo.pagekit.page import fmt, page, with_interval
from mmgrpo.reports.run_data import RunData
from mmgrpo.pagekit.svg import COLORS, Line, interval_bars, line_chart
from mmgrpo.pagekit.thumbnails import image_markup, media_markup

logger = logging.getLogger(__name__)

REPORT_FILE = "report.html"
GALLERY_STEPS = 6  # logged steps the gallery shows, spread over the run
CHANGED_SHOWN = 24  # held-out prompts shown per evaluation pair
EVAL_TAGS = ("before GRPO", "after GRPO")

SCRIPT = """
for (const gallery of document.querySelectorAll('section.gallery')) {
  const step = gallery.querySelector('.step-filter'), outcome = gallery.querySelector('.outcome-filter');
  const filter = () => {
    for (const card of gallery.querySelectorAll('.card')) {
      const stepOk = step.value === 'all' || card.dataset.step === step.value;
      const outcomeOk = outcome.value === 'all' || card.dataset.outcome === outcome.value;
      card.style.display = stepOk && outcomeOk ? '' : 'none';
    }
  };
  step.addEventListener('change', filter);
  outcome.addEventListener('change', filter);
}
"""


def refresh_report(run_dir: Path, alerts: AlertsConfig) -> Path | None:
    """Rewrite ``run_dir/report.html`` from what the run has written so far. A failure is logged, not
    raised: a report must never stop the training it reports on."""
    try:
        return write_html_report([RunData.load(run_dir)], Path(run_dir) / REPORT_FILE, alerts)
    except Exception as error:  # noqa: BLE001 - any bug in the report is logged and training goes on
        logger.warning("could not write %s: %s: %s", Path(run_dir) / REPORT_FILE, type(error).__name__, error)
        return None


def write_html_report(runs: Sequence[RunData], out: Path, alerts: AlertsConfig = AlertsConfig()) -> Path:
    """Write the page for ``runs`` (each run's gallery and evaluations) to ``out``, atomically."""
    out = Path(out)
    staging = out.with_name(out.name + ".tmp")
    staging.write_text(render(runs, alerts), encoding="utf-8")
    staging.replace(out)
    return out


def render(runs: Sequence[RunData], alerts: AlertsConfig = AlertsConfig()) -> str:
    title = "Run report: " + ", ".join(run.name for run in runs)
    body = [f"<h1>{html.escape(title)}</h1>"]
    body += _failures(runs)
    body += _alerts(runs, alerts)
    body += _summary(runs)
    body += _config_changes(runs)
    body += _curves(runs)
    for index, run in enumerate(runs):
        body += _gallery(gallery_groups(run.completions, GALLERY_STEPS), run.name, index)
    for run in runs:
        body += _evaluations(run, named=len(runs) > 1)
    return page(title, body, SCRIPT)


def _failures(runs: Sequence[RunData]) -> list[str]:
    """Why a run stopped (its ``failure.json``), with every row it names and their media."""
    parts = []
    for run in runs:
        if not run.failure:
            continue
        rows = "".join(
            f"<tr><td>{html.escape(str(row.get('id')))}</td><td>{html.escape(', '.join(row.get('media', [])))}</td></tr>"
            for row in run.failure.get("rows", [])
        )
        table = f"<table><tr><th>row</th><th>media</th></tr>{rows}</table>" if rows else ""
        parts.append(f'<div class="alert failure"><b>{html.escape(run.name)} stopped:</b> '
                     f'{html.escape(str(run.failure.get("error")))}{table}</div>')
    return parts


def _alerts(runs: Sequence[RunData], rules: AlertsConfig) -> list[str]:
    found = [(run.name, alert) for run in runs for alert in find_alerts(run.rows, rules)]
    configured = [(run.name, message) for run in runs for message in config_alerts(run.config)]
    return [f'<div class="alert"><b>{html.escape(name)}:</b> {html.escape(message)}</div>'
            for name, message in configured] + [
        f'<div class="alert"><b>{html.escape(name)}, step {alert.step}:</b> {html.escape(alert.message)}</div>'
        for name, alert in found]


def _summary(runs: Sequence[RunData]) -> list[str]:
    keys = list(dict.fromkeys(key for run in runs for key in run.summary))
    if not keys:
        return ["<h2>Summary</h2><p class='muted'>The run has not finished: no summary yet.</p>"]
    header = "".join(f"<th>{html.escape(run.name)}</th>" for run in runs)
    rows = "".join(
        f"<tr><td>{html.escape(key)}</td>{''.join(f'<td>{fmt(run.summary.get(key))}</td>' for run in runs)}</tr>"
        for key in keys
    )
    bars = []
    for index, run in enumerate(runs):
        for tag in EVAL_TAGS:
            numbers = run.evaluation_numbers(tag)
            if "accuracy" in numbers:
                label = f"{run.name}: {tag.split()[0]}" if len(runs) > 1 else tag
                bars.append((label, numbers["accuracy"], numbers.get("accuracy_ci_low"), numbers.get("accuracy_ci_high"),
                             COLORS[(2 * index + (tag == EVAL_TAGS[1])) % len(COLORS)]))
    chart = interval_bars("Held-out accuracy (interval: 95% Wilson)", bars)
    return [f"<h2>Summary</h2><table><tr><th></th>{header}</tr>{rows}</table>", chart]


def _config_changes(runs: Sequence[RunData]) -> list[str]:
    parts = ["<h2>Config (keys changed from the defaults)</h2>"]
    for run in runs:
        changes = run.config_changes() if run.config else []
        rows = "".join(f"<tr><td>{html.escape(key)}</td><td>{fmt(default)}</td><td>{fmt(value)}</td></tr>"
                       for key, default, value in changes)
        parts.append(f"<h3>{html.escape(run.name)}</h3><table><tr><th>key</th><th>default</th><th>this run</th></tr>"
                     f"{rows}</table>")
    return parts


def _curves(runs: Sequence[RunData]) -> list[str]:
    charts, run_rows = [], [run.curve_rows() for run in runs]
    for panel in PANELS:
        lines = []
        for run_index, (run, rows) in enumerate(zip(runs, run_rows)):
            for key_index, key in enumerate(panel_keys(panel, rows)):
                xs, ys = series(rows, key)
                label = key if len(runs) == 1 else f"{run.name}: {key}"
                color = COLORS[(run_index * 3 + key_index) % len(COLORS)]
                lines.append(Line(label, xs, ys, ema(ys, smoothing_weight(len(ys))), color))
        charts.append(line_chart(panel.title, lines))
    return ["<h2>Training curves</h2><p class='muted'>Faint: every step; solid: smoothed (EMA over ~5% of the run).</p>",
            f"<div class='charts'>{''.join(charts)}</div>"]


def _gallery(groups: Sequence[GalleryGroup], run_name: str, index: int) -> list[str]:
    """Run ``index``'s gallery with its own step and outcome filters."""
    steps = sorted({group.step for group in groups})
    options = "".join(f'<option value="{step}">step {step}</option>' for step in steps)
    controls = (f'<p>Step <select class="step-filter"><option value="all">all</option>{options}</select> '
                'Group <select class="outcome-filter"><option value="all">all</option>'
                '<option value="solved">some completion correct</option>'
                '<option value="unsolved">no completion correct</option></select></p>')
    cards = [_card(group) for group in groups]
    empty = "" if cards else "<p class='muted'>No completions logged (log.log_completions_every).</p>"
    return [f"<section class='gallery' id='gallery-{index}'><h2>Sample gallery ({html.escape(run_name)})</h2>"
            f"{controls}<div>{''.join(cards)}{empty}</div></section>"]


def _card(group: GalleryGroup) -> str:
    media = "".join(media_markup(ref, kind) for kind, refs in group.media.items() for ref in refs)
    best, worst = (group.best, group.worst) if group.rewards_vary else (None, None)
    rows = []
    for index, record in enumerate(group.completions):
        mark = " best" if index == best else " worst" if index == worst else ""
        components = ", ".join(f"{name} {fmt(value)}" for name, value in record.get("rewards", {}).items())
        flags = " ✓" if record.get("correct") else ""
        flags += " (truncated)" if record.get("truncated") else ""
        shown = _turns(record["turns"]) if record.get("turns") else html.escape(record["completion"])
        rows.append(f'<div class="completion{mark}">{shown}'
                    f'<div class="muted">reward {fmt(record["reward"])} ({html.escape(components)}), advantage '
                    f'{fmt(record.get("advantage"))}{flags}</div></div>')
    outcome = "solved" if group.any_correct else "unsolved"
    return (f'<div class="card" data-step="{group.step}" data-outcome="{outcome}"><div class="head">{media}<div>'
            f'<div class="muted">step {group.step} · {html.escape(group.sample_id)}</div>'
            f'<div>{html.escape(group.prompt)}</div><div><b>answer:</b> {html.escape(str(group.answer))}</div>'
            f'</div></div>{"".join(rows)}</div>')


def _turns(turns: Sequence[dict[str, Any]]) -> str:
    """A multi-turn completion turn by turn: the policy's turns as text, the tools' muted with their images."""
    parts = []
    for turn in turns:
        images = "".join(image_markup(source, "tool image") for source in turn.get("images", []))
        kind = "turn" if turn["role"] == "assistant" else "turn tool"
        parts.append(f'<div class="{kind}"><b>{html.escape(turn["role"])}:</b> {html.escape(turn["text"])}'
                     f'{f"<div>{images}</div>" if images else ""}</div>')
    return "".join(parts)


def _evaluations(run: RunData, *, named: bool) -> list[str]:
    """``run``'s evaluations and the held-out answers that changed between its first and last; ``named``
    puts the run's name in the heading (a page of several runs)."""
    if not run.evaluations:
        return []
    parts = [f"<h2>Held-out evaluations{f' ({html.escape(run.name)})' if named else ''}</h2>"]
    numbers = {tag: run.evaluation_numbers(tag) for tag in run.evaluations}
    keys = [key for key in dict.fromkeys(k for n in numbers.values() for k in n) if not key.endswith(("_ci_low", "_ci_high"))]
    header = "".join(f"<th>{html.escape(tag)}</th>" for tag in numbers)
    rows = "".join(f"<tr><td>{html.escape(key)}</td>"
                   f"{''.join(f'<td>{with_interval(n, key)}</td>' for n in numbers.values())}</tr>" for key in keys)
    parts.append(f"<table><tr><th></th>{header}</tr>{rows}</table>")
    if all(tag in run.evaluations for tag in EVAL_TAGS):
        changes = changed_answers(*(run.evaluations[tag] for tag in EVAL_TAGS))
        fixed = sum(change.now_correct for change in changes)
        parts.append(f"<h3>Answers that changed ({fixed} now right, {len(changes) - fixed} now wrong; "
                     f"first {CHANGED_SHOWN} shown)</h3><table><tr><th>media</th><th>prompt</th><th>answer</th>"
                     f"<th>before GRPO</th><th>after GRPO</th></tr>")
        for change in changes[:CHANGED_SHOWN]:
            media = "".join(media_markup(ref) for ref in change.media)
            verdict = "now right" if change.now_correct else "now wrong"
            parts.append(f"<tr><td>{media}</td><td>{html.escape(change.sample_id)}<br><span class='muted'>{verdict}"
                         f"</span><br>{html.escape(change.prompt)}</td><td>{html.escape(str(change.answer))}</td><td><code>{html.escape(change.before)}"
                         f"</code></td><td><code>{html.escape(change.after)}</code></td></tr>")
        parts.append("</table>")
    return parts
