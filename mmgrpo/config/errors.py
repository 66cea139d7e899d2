"""The one error type of the config layer, and the "did you mean" hint it carries."""

from __future__ import annotations

import difflib
from typing import Iterable


class ConfigError(ValueError):
    """A config file, override or value is invalid; the message names the key and why."""


def closest(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` candidates that look like ``name`` (typos, swapped letters)."""
    return difflib.get_close_matches(name, list(candidates), n=n, cutoff=0.6)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` Did you mean 'x' or 'y'?`` when some candidate is close to ``name``, else ``""``."""
    matches = closest(name, candidates)
    return f" Did you mean {' or '.join(map(repr, matches))}?" if matches else ""
