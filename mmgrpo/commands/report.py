"""``mmgrpo report DIR [DIR ...] [--out FILE] [--samples N]``: (re)build ``report.html``.

A training run folder: its ``report.html`` (also while the run is still training). Several: one page
comparing them (summaries side by side, curves overlaid; the gallery and evaluations of the
first), by default ``compare.html`` in the first run's folder. ``--out`` writes elsewhere.
An evaluation output folder (``mmgrpo eval --out DIR``, or one of its ``models/<i>-<name>``): its
``report.html`` rebuilt from its results.json and samples.jsonl, embedding at most ``--samples``
items per model and benchmark; several such folders are each rebuilt in place.
"""

from __future__ import annotations

import argparse
from pathlib import Path

COMPARE_FILE = "compare.html"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="DIR",
                        help="run folders (<log.output_dir>/<run_name>) or evaluation output folders")
    parser.add_argument("--out", type=Path, help="where to write the page (default: see above)")
    parser.add_argument("--samples", type=int, metavar="N",
                        help="evaluation folders: items per model and benchmark the sample browser embeds (default 200)")


def run(args: argparse.Namespace) -> int:
    from eval.report import OUTPUT_FILES

    evaluations = [path for path in args.runs if (path / OUTPUT_FILES["results"]).is_file()]
    if evaluations:
        return _rebuild_evaluations(args, evaluations)
    from mmgrpo.config import Config
    from mmgrpo.reports.html import REPORT_FILE, write_html_report
    from mmgrpo.reports.run_data import RunData

    runs = [RunData.load(path) for path in args.runs]
    default = args.runs[0] / (REPORT_FILE if len(runs) == 1 else COMPARE_FILE)
    alerts = Config.from_dict(runs[0].config).log.alerts if runs[0].config else Config().log.alerts
    out = write_html_report(runs, args.out or default, alerts)
    print(out)
    return 0


def _rebuild_evaluations(args: argparse.Namespace, folders: list[Path]) -> int:
    """Each evaluation folder's report.html, rebuilt in place."""
    from eval.html_report import DEFAULT_SAMPLES, rebuild
    from mmgrpo.config import ConfigError

    if len(folders) != len(args.runs):
        others = ", ".join(str(path) for path in args.runs if path not in folders)
        raise ConfigError(f"evaluation folders and training runs cannot be mixed (no results.json in {others})")
    if args.out is not None:
        raise ConfigError("--out applies to training runs; an evaluation's report.html is rebuilt in its folder")
    if args.samples is not None and args.samples < 0:
        raise ConfigError(f"--samples must be >= 0, got {args.samples}")
    for folder in folders:
        print(rebuild(folder, samples=DEFAULT_SAMPLES if args.samples is None else args.samples))
    return 0
