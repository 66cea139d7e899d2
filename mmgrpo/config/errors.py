"""The one error type of the config layer, and the "did you mean" hint it carries."""

from __future__ import annotations

import difflib
from typing import Iterable


class ConfigError(ValueError):
    """A config file, override or value is invalid; the message names the key and why.

    ``problems`` holds each problem on its own (one line each, as the command line prints them)."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]

    @classmethod
    def listing(cls, what: str, problems: list[str]) -> ConfigError:
        """One error for all ``problems``: the problem itself when there is one, else ``what`` and a list."""
        if len(problems) == 1:
            return cls(problems[0])
        return cls(f"{what}:\n  - " + "\n  - ".join(problems), problems)


def closest(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` candidates that look like ``name`` (typos, swapped letters)."""
    return difflib.get_close_matches(name, list(candidates), n=n, cutoff=0.6)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` Did you mean 'x' or 'y'?`` when some candidate is close to ``name``, else ``""``."""
    matches = closest(name, candidates)
    return f" Did you mean {' or '.join(map(repr, matches))}?" if matches else ""
