"""Reward-hacking guards: find the one answer a completion commits to, or refuse to grade it.

Accuracy rewards grade only what :func:`guarded_answer` returns. Each guard, on by
default, turns a completion into "no answer" (accuracy 0) and names itself:

- ``too_long``: the completion has more than ``max_chars`` characters.
- ``multiple_answers``: more than one answer container (e.g. two ``<answer>`` tags,
  nested tags, or two ``\\boxed{}`` for math) -- hedging between answers.
- ``untagged_answer``: no answer container at all -- the answer sits outside the tags.
- ``empty_answer``: the container holds only whitespace.
- ``prompt_copy``: the answer repeats a run of ``copy_min_words`` consecutive words of
  the question (or the whole question when it is shorter). Only the answer is checked,
  not the reasoning, which may legitimately restate the question. A bare number or
  option letter is never a copy -- even when the question mentions it ("how many of the
  3 red cubes are shiny?" answered "3") -- because it is shorter than the window.
  Multiple-choice options live in the task's ``choices`` field, not in the question, so
  answering with an option's text is not a copy either.

With a guard switched off the lenient reading applies: the last of several answers,
or the text after ``</think>`` when there is no answer tag.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Mapping

from tasks.parsing import ANSWER_TAG, THINK_TAG, tag_contents

AnswerExtractor = Callable[[str], list[str]]


@dataclass(frozen=True)
class Guards:
    """Which reward-hacking guards are on, and their limits."""

    empty_answer: bool = True
    multiple_answers: bool = True
    untagged_answer: bool = True
    prompt_copy: bool = True
    max_chars: int | None = 4000  # None: no length limit
    copy_min_words: int = 6  # shortest run of question words that counts as a copy

    def __post_init__(self) -> None:
        if self.max_chars is not None and self.max_chars <= 0:
            raise ValueError(f"Guards.max_chars must be positive or None, got {self.max_chars}")
        if self.copy_min_words <= 0:
            raise ValueError(f"Guards.copy_min_words must be positive, got {self.copy_min_words}")

    @classmethod
    def off(cls) -> Guards:
        """Every guard switched off (the lenient reading)."""
        return cls(empty_answer=False, multiple_answers=False, untagged_answer=False, prompt_copy=False, max_chars=None)

    @classmethod
    def coerce(cls, value: Guards | Mapping[str, Any] | bool | None) -> Guards:
        """Accept a ``Guards``, a mapping of its fields (from YAML), True/None (defaults) or False (off)."""
        if isinstance(value, Guards):
            return value
        if value is None or value is True:
            return cls()
        if value is False:
            return cls.off()
        unknown = set(value) - {field.name for field in fields(cls)}
        if unknown:
            raise ValueError(f"unknown guard option(s) {sorted(unknown)}; known: {sorted(asdict(cls()))}")
        return cls(**value)


@dataclass(frozen=True)
class GuardedAnswer:
    """The answer text to grade (None: nothing to grade) and the guard that tripped, if any."""

    text: str | None
    tripped: str | None = None


def answer_tags(completion: str) -> list[str]:
    """Default answer containers: the contents of each ``<answer>`` tag."""
    return tag_contents(completion, ANSWER_TAG)


def guarded_answer(
    completion: str,
    problem: str | None = None,
    guards: Guards | None = None,
    *,
    extract: AnswerExtractor = answer_tags,
) -> GuardedAnswer:
    """The single answer ``completion`` commits to, after the guards (see module docstring)."""
    guards = guards or Guards()
    if guards.max_chars is not None and len(completion) > guards.max_chars:
        return GuardedAnswer(None, "too_long")
    candidates = extract(completion)
    if len(candidates) > 1 and guards.multiple_answers:
        return GuardedAnswer(None, "multiple_answers")
    if not candidates:
        if guards.untagged_answer:
            return GuardedAnswer(None, "untagged_answer")
        candidates = [completion.rsplit(f"</{THINK_TAG}>", 1)[-1]]
    answer = candidates[-1]
    if not answer.strip():
        return GuardedAnswer(None, "empty_answer" if guards.empty_answer else None)
    if guards.prompt_copy and problem and copies_prompt(answer, problem, min_words=guards.copy_min_words):
        return GuardedAnswer(None, "prompt_copy")
    return GuardedAnswer(answer)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def copies_prompt(answer: str, problem: str, *, min_words: int) -> bool:
    """Whether ``answer`` holds ``min_words`` consecutive words of ``problem`` (all of it if shorter)."""
    problem_words, answer_words = _words(problem), _words(answer)
    window = min(min_words, len(problem_words))
    if window == 0:
        return False
    problem_runs = {tuple(problem_words[i : i + window]) for i in range(len(problem_words) - window + 1)}
    return any(tuple(answer_words[i : i + window]) in problem_runs for i in range(len(answer_words) - window + 1))
