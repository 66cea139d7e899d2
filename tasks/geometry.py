"""``geometry``: multiple choice over a diagram (geometry3k style).

Rows: ``id``, ``problem``, ``choices`` (option texts, shown as ``(A) ...``), ``answer``
(the letter or the option text), ``image`` / ``images``. A row without ``choices`` is
graded as free-form math (``math-verify``), as some geometry3k exports have none.

Reading an answer (``choice_accuracy``), after the guards of :mod:`tasks.guards`:

- what wraps a short answer is read through first (:func:`tasks.parsing.strip_decoration`):
  ``"\\boxed{B}"``, ``"\\text{B}"``, ``"$B$"``, ``"Option B"``, ``"The answer is B"``, ``"Answer: B"``;
- a letter, bare or decorated: ``"B"``, ``"(B)"``, ``"B."``, ``"B)"``. Letters are upper
  case, so the article "a" is never read as option A;
- a letter followed by text (``"(B) 12"``): the text must be option B's text -- an answer
  that names one option by letter and another by text is wrong;
- an option's text alone (``"12"``, ``"$12$"``), compared after normalising spaces, case,
  ``$`` and a final period (``"Moved right"`` is option ``"Moved right."``), or by ``math-verify``
  equivalence; it must match exactly one option.
"""

from __future__ import annotations

import re
import string
from functools import partial
from typing import Any, Mapping, Sequence

from tasks.base import RowError
from tasks.guards import Guards, guarded_answer
from tasks.math import TimedTask
from tasks.math_verifier import DEFAULT_TIMEOUT, is_equivalent, is_readable
from tasks.parsing import normalize_space, strip_decoration
from tasks.registry import register_reward, register_task

_LETTER_THEN_TEXT = re.compile(r"\(?([A-Z])(?:[.:)]|(?=\s)|$)\s*(.*)", re.DOTALL)


def letter(index: int) -> str:
    return string.ascii_uppercase[index]


def _normalize_option(text: str) -> str:
    """Case, spaces, ``$`` and a final period do not matter: "(B) Moved right" names option "Moved right."."""
    return normalize_space(text.replace("$", "")).removesuffix(".").rstrip()


def option_matching(text: str, choices: Sequence[str], timeout_seconds: float = DEFAULT_TIMEOUT) -> int | None:
    """Index of the only option whose text ``text`` is (normalised or equivalent), else None.

    math-verify reads ``text`` once before comparing it with each numeric option: an answer it
    cannot read (100k characters of junk) costs one bounded read, not one per option.
    """
    wanted = _normalize_option(text)
    matches = [i for i, choice in enumerate(choices) if _normalize_option(choice) == wanted]
    numeric = [i for i, choice in enumerate(choices) if _has_digits(choice)]
    if not matches and numeric and is_readable(text, timeout_seconds=timeout_seconds):
        matches = [i for i in numeric if is_equivalent(text, choices[i], timeout_seconds=timeout_seconds)]
    return matches[0] if len(matches) == 1 else None


def _has_digits(choice: str) -> bool:
    """Only options with a number are worth a math-verify comparison."""
    return any(char.isdigit() for char in choice)


def resolve_choice(text: str, choices: Sequence[str], timeout_seconds: float = DEFAULT_TIMEOUT) -> int | None:
    """The option index an answer text names (rules in the module docstring), or None."""
    text = strip_decoration(text)
    match = _LETTER_THEN_TEXT.fullmatch(text)
    if match and (index := string.ascii_uppercase.index(match.group(1))) < len(choices):
        rest = match.group(2).strip().removesuffix(".")  # "(B)." ends a sentence
        return index if not rest or option_matching(rest, choices, timeout_seconds) == index else None
    return option_matching(text, choices, timeout_seconds)


@register_reward("choice_accuracy")
def choice_accuracy(
    completions: Sequence[str],
    answer: Sequence[Any],
    problem: Sequence[str | None] | None = None,
    choices: Sequence[Sequence[str] | None] | None = None,
    *,
    guards: Guards | Mapping[str, Any] | bool | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT,
    **_,
) -> list[float]:
    guards = Guards.coerce(guards)
    problems = problem if problem is not None else [None] * len(completions)
    options = choices if choices is not None else [None] * len(completions)
    scores = []
    for text, truth, question, item_choices in zip(completions, answer, problems, options):
        if not item_choices:
            predicted = guarded_answer(text, question, guards).text
            scores.append(float(predicted is not None and is_equivalent(predicted, str(truth),
                                                                        timeout_seconds=timeout_seconds)))
            continue
        truth_index = resolve_choice(str(truth), item_choices, timeout_seconds)
        if truth_index is None:
            raise ValueError(f"ground truth {truth!r} names none of the choices {list(item_choices)}")
        read = partial(resolve_choice, choices=item_choices, timeout_seconds=timeout_seconds)
        predicted = guarded_answer(text, question, guards, read=read).text
        scores.append(float(predicted is not None and read(predicted) == truth_index))
    return scores


@register_task("geometry")
class GeometryTask(TimedTask):
    default_rewards = {"format": 0.1, "choice_accuracy": 1.0}
    metric_reward = "choice_accuracy"
    guarded_rewards = ("choice_accuracy",)
    timed_rewards = ("choice_accuracy",)

    def _choices(self, row: Mapping[str, Any]) -> list[str] | None:
        choices = row.get("choices")
        if choices is None or len(choices) == 0:
            return None
        if len(choices) > len(string.ascii_uppercase):
            raise RowError(row, "choices", f"{len(choices)} options; at most {len(string.ascii_uppercase)}")
        return [str(choice) for choice in choices]

    def ground_truth(self, row: Mapping[str, Any]) -> str:
        truth, choices = str(super().ground_truth(row)), self._choices(row)
        if choices is None:
            return truth
        index = resolve_choice(truth, choices)
        if index is None:
            raise RowError(row, "answer", f"{truth!r} names none of the choices {choices}")
        return letter(index)

    def task_fields(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return {"choices": self._choices(row)}

    def question(self, row: Mapping[str, Any]) -> str:
        choices = self._choices(row)
        listed = "".join(f"\n({letter(i)}) {choice}" for i, choice in enumerate(choices or []))
        return f"{super().question(row)}\nChoices:{listed}" if choices else super().question(row)
