"""How a completion's reasoning splits into steps, for process rewards.

A process reward may score each step of a completion. It returns either character spans
``(start, end, score)`` it found itself, or one score per step of the task's step rule
(``task.options: {step_rule: ...}``), which places them. Rules look inside
``<think>...</think>`` when the completion has it, else at the whole text:

- ``lines``: each non-blank line (the default);
- ``step_tags``: the content of each ``<step>...</step>``;
- ``sentences``: each sentence, ended by ``.``, ``!``, ``?`` or a line break.

Spans exclude surrounding whitespace.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from mmgrpo.registry import Registry

StepSpans = list[tuple[int, int]]  # (first character, one past the last) of each step

THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
STEP_RULES: Registry[Callable[[str], StepSpans]] = Registry("step rule")


def split_steps(text: str, rule: str = "lines") -> StepSpans:
    """The steps of ``text`` under ``rule``, as spans of ``text``."""
    think = THINK.search(text)
    start, end = think.span(1) if think else (0, len(text))
    return [(start + first, start + last) for first, last in STEP_RULES.get(rule)(text[start:end])]


def _stripped_matches(pattern: re.Pattern[str], text: str, group: int = 0) -> StepSpans:
    """Spans of ``pattern``'s matches (``group``), without surrounding whitespace; blank ones left out."""
    spans = []
    for match in pattern.finditer(text):
        first, last = match.span(group)
        piece = text[first:last]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            spans.append((first + lead, first + len(piece.rstrip())))
    return spans


@STEP_RULES.register("lines")
def _lines(text: str) -> StepSpans:
    return _stripped_matches(re.compile(r"[^\n]+"), text)


@STEP_RULES.register("step_tags")
def _step_tags(text: str) -> StepSpans:
    return _stripped_matches(re.compile(r"<step>(.*?)</step>", re.DOTALL), text, group=1)


@STEP_RULES.register("sentences")
def _sentences(text: str) -> StepSpans:
    return _stripped_matches(re.compile(r"[^.!?\n]+[.!?]*"), text)
