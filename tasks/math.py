"""``math``: a numeric or symbolic answer, checked for equivalence with ``math-verify``.

The answer container is the ``<answer>`` tag or, when the completion has no answer tag,
a ``\\boxed{...}`` (so ``\\frac{1}{2}``, ``0.5`` and ``\\boxed{1/2}`` all match a ground truth
of ``1/2``). Several tags or several boxes trip the ``multiple_answers`` guard. Rows:
``id``, ``problem``, ``answer`` (LaTeX or plain), optional media.

``math-verify`` times out with ``SIGALRM``, which only works on the main thread; off the
main thread (a reward worker pool) the timeout is skipped rather than crashing.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any, Mapping, Sequence

from math_verify import parse, verify

from tasks.base import RowError, Task
from tasks.guards import Guards, guarded_answer
from tasks.parsing import ANSWER_TAG, boxed_contents, count_tags, tag_contents
from tasks.registry import register_reward, register_task

_LATEX_DELIMITERS = ("$", "\\boxed", "\\(", "\\[")


def math_answers(completion: str) -> list[str]:
    """Answer containers: the ``<answer>`` tags if there are any, else the ``\\boxed{}`` contents."""
    if count_tags(completion, ANSWER_TAG)[0]:
        return tag_contents(completion, ANSWER_TAG)
    return boxed_contents(completion)


def _usable_timeout(seconds: int | None) -> int | None:
    return seconds if threading.current_thread() is threading.main_thread() else None


def read_math(text: str, *, timeout_seconds: int | None = 5) -> list:
    """``math-verify``'s reading of an answer text (empty if it reads nothing).

    Text without LaTeX delimiters is read as inline LaTeX first: bare ``\\sqrt{8}`` reads
    as nothing and bare ``2\\sqrt{3}`` as ``2`` otherwise. Plain text is the fallback.
    No string fallback: an unreadable answer never "equals" a ground truth as a string.
    """
    timeout = _usable_timeout(timeout_seconds)
    options = {"fallback_mode": "no_fallback", "parsing_timeout": timeout}
    if any(marker in text for marker in _LATEX_DELIMITERS):
        return parse(text, **options)
    return parse(f"${text}$", **options) or parse(text, **options)


@lru_cache(maxsize=4096)  # a group's G completions share one ground truth
def parse_ground_truth(answer: str, timeout_seconds: int | None = 5) -> list:
    """``math-verify``'s reading of a ground truth; ValueError if it reads nothing."""
    parsed = read_math(answer, timeout_seconds=timeout_seconds)
    if not parsed:
        raise ValueError(f"math-verify cannot read the ground truth {answer!r}")
    return parsed


def is_equivalent(answer_text: str, truth: str, *, timeout_seconds: int | None = 5) -> bool:
    """Whether a model's answer text equals the ground truth mathematically (never raises on the answer)."""
    gold = parse_ground_truth(truth, timeout_seconds)
    try:
        predicted = read_math(answer_text, timeout_seconds=timeout_seconds)
        return bool(predicted) and verify(gold, predicted, timeout_seconds=_usable_timeout(timeout_seconds))
    except Exception:  # math-verify/sympy can fail in many ways on arbitrary model text
        return False


@register_reward("math_accuracy")
def math_accuracy(
    completions: Sequence[str],
    answer: Sequence[Any],
    problem: Sequence[str | None] | None = None,
    *,
    guards: Guards | Mapping[str, Any] | bool | None = None,
    timeout_seconds: int | None = 5,
    **_,
) -> list[float]:
    guards = Guards.coerce(guards)
    problems = problem if problem is not None else [None] * len(completions)
    scores = []
    for text, truth, question in zip(completions, answer, problems):
        predicted = guarded_answer(text, question, guards, extract=math_answers).text
        correct = predicted is not None and is_equivalent(predicted, str(truth), timeout_seconds=timeout_seconds)
        scores.append(float(correct))
    return scores


@register_task("math")
class MathTask(Task):
    default_rewards = {"format": 0.1, "math_accuracy": 1.0}
    metric_reward = "math_accuracy"
    guarded_rewards = ("math_accuracy",)

    def ground_truth(self, row: Mapping[str, Any]) -> str:
        truth = str(super().ground_truth(row))
        try:
            parse_ground_truth(truth)
        except ValueError as error:
            raise RowError(row, "answer", str(error)) from None
        return truth

    def extract_answers(self, completion: str) -> list[str]:
        return math_answers(completion)
