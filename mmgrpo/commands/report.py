"""``mmgrpo report RUN_DIR [RUN_DIR ...] [--out FILE]``: (re)build ``report.html``.

One run folder: its ``report.html`` (also while the run is still training). Several: one page
comparing them (summaries side by side, curves overlaid; the gallery and evaluations of the
first), by default ``compare.html`` in the first run's folder. ``--out`` writes elsewhere.
"""

from __future__ import annotations

import argparse
from pathlib import Path

COMPARE_FILE = "compare.html"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run folders (<log.output_dir>/<run_name>)")
    parser.add_argument("--out", type=Path, help="where to write the page (default: see above)")


def run(args: argparse.Namespace) -> int:
    from mmgrpo.config import Config
    from mmgrpo.reports.html import REPORT_FILE, write_html_report
    from mmgrpo.reports.run_data import RunData

    runs = [RunData.load(path) for path in args.runs]
    default = args.runs[0] / (REPORT_FILE if len(runs) == 1 else COMPARE_FILE)
    alerts = Config.from_dict(runs[0].config).log.alerts if runs[0].config else Config().log.alerts
    out = write_html_report(runs, args.out or default, alerts)
    print(out)
    return 0
