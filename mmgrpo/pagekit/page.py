"""What every self-contained report page shares: the stylesheet, the page shell and number formatting."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
.alert { background: #fdecea; border: 1px solid #c44e52; padding: 8px 12px; margin: 6px 0; }
.charts { display: flex; flex-wrap: wrap; gap: 8px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 10px; margin: 10px 0; }
.card .head { display: flex; gap: 12px; }
.card .head > .media { flex: none; align-self: flex-start; }
.completion { font-family: monospace; white-space: pre-wrap; margin: 3px 0; padding: 3px 6px; border-left: 4px solid #ddd; }
.best { border-left-color: #55a868; background: #eef7ef; }
.worst { border-left-color: #c44e52; background: #fbeeee; }
.muted { color: #888; font-size: 12px; }
.turn { margin: 2px 0; }
.turn.tool { color: #666; background: #f4f4f8; padding: 2px 4px; }
img.media, svg.media { border: 1px solid #ccc; margin-right: 4px; }
"""


def page(title: str, body: list[str], script: str, style: str = "") -> str:
    """A whole HTML document: ``body`` fragments, the shared stylesheet (plus ``style``) and ``script``."""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{STYLE}{style}</style></head><body>{''.join(body)}<script>{script}</script></body></html>")


def with_interval(numbers: Mapping[str, Any], key: str) -> str:
    """``numbers[key]`` formatted, followed by ``[low, high]`` when its interval bounds are there."""
    value = numbers.get(key)
    low, high = numbers.get(f"{key}_ci_low"), numbers.get(f"{key}_ci_high")
    interval = f" [{fmt(low)}, {fmt(high)}]" if low is not None and high is not None else ""
    return fmt(value) + interval


def fmt(value: Any) -> str:
    """A number to 4 significant digits, lists and dicts as JSON, anything else as text; HTML-escaped."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return html.escape(json.dumps(value))
    return html.escape(str(value))
