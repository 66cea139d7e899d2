"""math-verify in a child process: reads JSON requests on stdin, answers one JSON line each.

Run by :mod:`tasks.math_verifier` as a plain script (``runpy.run_path``), so it imports
math-verify and nothing of this project. A request is ``["gold", truth]`` (can
math-verify read this ground truth?) or ``["equal", answer, truth]`` (is the answer
equivalent to it?); the reply is ``true`` or ``false``. A first ``true`` line says
the worker is ready. math-verify's own signal-based
timeouts are off: the parent bounds each request by killing this process, which works
from any thread and stops sympy wherever it is.
"""

from __future__ import annotations

import json
import logging
import sys

from math_verify import parse, verify

LATEX_DELIMITERS = ("$", "\\boxed", "\\(", "\\[")


def read_math(text: str) -> list:
    """math-verify's reading of an answer text (empty if it reads nothing).

    Text without LaTeX delimiters is read as inline LaTeX first: bare ``\\sqrt{8}`` reads
    as nothing and bare ``2\\sqrt{3}`` as ``2`` otherwise. Plain text is the fallback.
    No string fallback: an unreadable answer never "equals" a ground truth as a string.
    """
    options = {"fallback_mode": "no_fallback", "parsing_timeout": None}
    if any(marker in text for marker in LATEX_DELIMITERS):
        return parse(text, **options)
    return parse(f"${text}$", **options) or parse(text, **options)


def is_readable(truth: str) -> bool:
    return bool(read_math(truth))


def is_equal(answer: str, truth: str) -> bool:
    gold, predicted = read_math(truth), read_math(answer)
    return bool(gold) and bool(predicted) and verify(gold, predicted, timeout_seconds=None)


REQUESTS = {"gold": is_readable, "equal": is_equal}


def _reply(result: bool) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def serve() -> None:
    """Say ready (after a first comparison has loaded sympy's lazy parts), then answer requests
    until stdin closes; a request math-verify cannot handle answers false."""
    logging.disable(logging.CRITICAL)  # math-verify warns on every odd answer
    _reply(is_equal("1/2", "0.5"))
    for line in sys.stdin:
        kind, *texts = json.loads(line)
        try:
            result = REQUESTS[kind](*texts)
        except Exception:  # sympy fails in many ways on arbitrary model text
            result = False
        _reply(bool(result))


if __name__ == "__main__":
    serve()
