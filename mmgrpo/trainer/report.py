"""End-of-run ``report.md`` with PNG plots of the training curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from mmgrpo.reports.curves import PANELS
from mmgrpo.skipped_rows import LEDGER_FILE, SkippedRow

SKIPPED_ROWS_SHOWN = 20  # the report lists this many skipped rows; skipped_rows.jsonl has them all


def plot_curves(rows: Sequence[dict[str, Any]], out_dir: Path) -> list[Path]:
    """One PNG per report.md panel (its first key) present in ``rows``; returns the written paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for key, title in ((panel.keys[0], panel.title) for panel in PANELS if panel.in_markdown):
        points = [(row["step"], row[key]) for row in rows if isinstance(row.get(key), (int, float))]
        if not points:
            continue
        steps, values = zip(*points)
        figure, axis = plt.subplots(figsize=(5, 3))
        axis.plot(steps, values, linewidth=1)
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
        path = out_dir / f"{key.replace('/', '_')}.png"
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written


def write_report(
    run_dir: Path,
    rows: Sequence[dict[str, Any]],
    summary: dict[str, Any],
    eval_sections: dict[str, str] | None = None,
    skipped: Sequence[SkippedRow] = (),
) -> Path:
    """Write ``run_dir/report.md``: summary table, eval tables (Markdown), skipped rows, curve plots."""
    plot_dir = run_dir / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    images = plot_curves(rows, plot_dir)
    lines = [
        f"# Run report: {run_dir.name}", "",
        "Curves, the sample gallery, alerts and the evaluations: [report.html](report.html).", "",
        "| quantity | value |", "|---|---|",
    ]
    lines += [f"| {key} | {_fmt(value)} |" for key, value in summary.items()]
    for title, markdown in (eval_sections or {}).items():
        lines += ["", f"## {title}", "", markdown.strip()]
    if skipped:
        lines += ["", "## Skipped rows", "", *skipped_rows_table(skipped)]
    if images:
        lines += ["", "## Training curves", ""]
        lines += [f"![{path.stem}](plots/{path.name})" for path in images]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def skipped_rows_table(skipped: Sequence[SkippedRow], shown: int = SKIPPED_ROWS_SHOWN) -> list[str]:
    """Markdown lines: how many rows were left out, then the first ``shown`` of them."""
    lines = [
        f"{len(skipped)} row(s) left out; all are listed in `{LEDGER_FILE}`.", "",
        "| split | id | stage | reason | source | detail |", "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {row.split} | {row.row_id} | {row.stage} | {row.reason} | {row.source} | {row.detail} |".replace("\n", " ")
        for row in skipped[:shown]
    ]
    return lines


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
