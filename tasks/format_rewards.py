"""Task-independent rewards: output format and length.

- ``think_format``: 1 if the completion is exactly one ``<think>...</think>`` then exactly
  one non-empty ``<answer>...</answer>`` and nothing else (whitespace allowed around and
  between them); else 0. The reasoning may be empty.
- ``answer_format``: 1 if the completion is exactly one non-empty ``<answer>...</answer>``
  and nothing else (whitespace allowed); else 0.
- ``format``: ``think_format`` for samples prompted with ``think=True`` (the sample's
  ``think`` field; missing means True), ``answer_format`` for ``think=False``.
- ``length_penalty``: 0 up to ``max_chars - buffer_chars`` characters, falling linearly to
  -1 at ``max_chars`` and staying -1 beyond (DAPO's soft overlong punishment, in characters
  because rewards see text).
"""

from __future__ import annotations

import re
from typing import Sequence

from tasks.parsing import ANSWER_TAG, THINK_TAG, count_tags
from tasks.registry import register_reward

_THINK_THEN_ANSWER = re.compile(r"\s*<think>.*</think>\s*<answer>(.*)</answer>\s*", re.DOTALL)
_ANSWER_ONLY = re.compile(r"\s*<answer>(.*)</answer>\s*", re.DOTALL)


def _tag_counts_are(completion: str, **expected: int) -> bool:
    """Whether each tag in ``expected`` opens and closes exactly that many times."""
    return all(count_tags(completion, tag) == (count, count) for tag, count in expected.items())


def is_think_then_answer(completion: str) -> bool:
    """One think block, then one non-empty answer, nothing else (tags counted first: with one of each, the
    pattern's backtracking is linear)."""
    if not _tag_counts_are(completion, **{THINK_TAG: 1, ANSWER_TAG: 1}):
        return False
    match = _THINK_THEN_ANSWER.fullmatch(completion)
    return bool(match and match.group(1).strip())


def is_answer_only(completion: str) -> bool:
    """One non-empty answer, nothing else (no think block; tags counted first, as above)."""
    if not _tag_counts_are(completion, **{THINK_TAG: 0, ANSWER_TAG: 1}):
        return False
    match = _ANSWER_ONLY.fullmatch(completion)
    return bool(match and match.group(1).strip())


@register_reward("think_format")
def think_format(completions: Sequence[str], **_) -> list[float]:
    return [float(is_think_then_answer(text)) for text in completions]


@register_reward("answer_format")
def answer_format(completions: Sequence[str], **_) -> list[float]:
    return [float(is_answer_only(text)) for text in completions]


@register_reward("format")
def format_reward(completions: Sequence[str], think: Sequence[bool | None] | None = None, **_) -> list[float]:
    modes = think if think is not None else [None] * len(completions)
    return [
        float(is_answer_only(text) if mode is False else is_think_then_answer(text))
        for text, mode in zip(completions, modes)
    ]


@register_reward("length_penalty")
def length_penalty(
    completions: Sequence[str], *, max_chars: int = 4000, buffer_chars: int = 1000, **_
) -> list[float]:
    if not 0 < buffer_chars <= max_chars:
        raise ValueError(f"length_penalty needs 0 < buffer_chars <= max_chars, got {buffer_chars}, {max_chars}")
    start = max_chars - buffer_chars
    return [0.0 - min(1.0, max(0, len(text) - start) / buffer_chars) for text in completions]
