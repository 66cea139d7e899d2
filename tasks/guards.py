"""The one answer a completion commits to, or a refusal to grade it (reward-hacking guards).

Every task reads answers here, with one rule: a completion answers with exactly one
well-formed container, and nothing answer-like stands beside it.

- Containers are ``<answer>...</answer>`` tags. When a completion has no answer tag, a
  ``\\boxed{...}`` is the container (the math convention). A ``\\boxed{}`` inside the answer
  tag is part of the answer; one outside it is a second answer.
- The reasoning is everything up to the last ``</think>``; an answer tag inside it is an
  answer given while thinking. A ``\\boxed{}`` inside it is an intermediate result when an
  answer follows the reasoning (math models box partial results while thinking), and the
  answer given while thinking when none does.

Accuracy rewards grade only what :func:`guarded_answer` returns. Each guard, on by
default unless said otherwise, turns a completion into "no answer" (accuracy 0) and
names itself:

- ``too_long``: more than ``max_tokens`` tokens (off by default: recipes allow long
  reasoning, and the rollout's ``max_new_tokens`` already bounds length). Counted with
  :func:`approx_token_count`, a tokenizer-free estimate that stays at or below what BPE
  tokenizers give for ordinary text, so the limit never cuts a completion the model's
  own token budget allowed.
- ``malformed_answer``: answer tags that do not pair up -- unclosed (``<answer>3</answer><answer>4``),
  stray (``<answer>3</answer></answer>``) or nested.
- ``answer_in_think``: a container inside the reasoning -- answering while thinking.
  Switched off, containers in the reasoning are ignored when one follows it (for models
  that box intermediate results while thinking).
- ``multiple_answers``: more than one container (two tags, or a tag and a ``\\boxed{}``
  outside it, or two boxes) -- hedging between answers.
- ``untagged_answer``: no container at all -- the answer sits outside the tags.
- ``empty_answer``: the container holds only whitespace.
- ``prompt_copy``: the answer repeats a run of ``copy_min_words`` consecutive words of
  the question (the whole question when it is shorter) AND what the task reads from
  the answer depends on the copied words. Reward functions pass the task's reader
  (``read``); an answer that reads the same with the copied words blanked out merely
  restates the question (``[{"bbox_2d": [...], "label": "<the referring expression>"}]``)
  and is graded. Without a reader every copy trips. A bare number or option letter is
  never a copy: it is shorter than the window.

With a guard switched off the lenient reading applies: the last container, or the text
after the last ``</think>`` when there is none.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Mapping

from tasks.parsing import ANSWER_TAG, THINK_TAG, Span, boxed_spans, tag_spans

AnswerReader = Callable[[str], Any]  # a task's reading of an answer text; None = unreadable

_TOKEN_PIECE = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class Guards:
    """Which reward-hacking guards are on, and their limits (``task.guards`` in the config)."""

    empty_answer: bool = True
    malformed_answer: bool = True
    answer_in_think: bool = True
    multiple_answers: bool = True
    untagged_answer: bool = True
    prompt_copy: bool = True
    max_tokens: int | None = None  # None: no length limit
    copy_min_words: int = 6  # shortest run of question words that counts as a copy

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError(f"Guards.max_tokens must be positive or None, got {self.max_tokens}")
        if self.copy_min_words <= 0:
            raise ValueError(f"Guards.copy_min_words must be positive, got {self.copy_min_words}")

    @classmethod
    def off(cls) -> Guards:
        """Every guard switched off (the lenient reading)."""
        switches = {field.name: False for field in fields(cls) if isinstance(field.default, bool)}
        return cls(**switches, max_tokens=None)

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


@dataclass(frozen=True)
class AnswerScan:
    """Where a completion's answer containers are, and whether its answer tags pair up."""

    containers: list[Span]  # answer tags, else boxes; plus boxes outside the tags; in text order
    tags_pair_up: bool
    reasoning_end: int  # end of the last ``</think>`` (0 when there is none)

    def in_reasoning(self) -> list[Span]:
        return [span for span in self.containers if span.start < self.reasoning_end]


def scan_answers(completion: str) -> AnswerScan:
    """Locate the answer containers of ``completion`` (the rule in the module docstring)."""
    tags, tags_pair_up = tag_spans(completion, ANSWER_TAG)
    tag_starts = [tag.start for tag in tags]  # sorted, the spans disjoint: one bisection per box
    boxes = [box for box in boxed_spans(completion)
             if not ((index := bisect.bisect_right(tag_starts, box.start) - 1) >= 0 and box.start < tags[index].end)]
    closing_think = completion.rfind(f"</{THINK_TAG}>")
    reasoning_end = 0 if closing_think < 0 else closing_think + len(f"</{THINK_TAG}>")
    if any(span.start >= reasoning_end for span in tags + boxes):  # boxes while thinking are intermediate results
        boxes = [box for box in boxes if box.start >= reasoning_end]
    containers = sorted(tags + boxes, key=lambda span: span.start)
    return AnswerScan(containers, tags_pair_up, reasoning_end)


def approx_token_count(text: str) -> int:
    """Tokens in ``text`` without a tokenizer: one per word and one per symbol.

    BPE tokenizers (Qwen, Llama, GPT) give every word at least one token (rare words and
    numbers several: Qwen splits digits) and every symbol one, so this is close to and
    rarely above the real count.
    """
    return len(_TOKEN_PIECE.findall(text))


def guarded_answer(
    completion: str,
    problem: str | None = None,
    guards: Guards | None = None,
    *,
    read: AnswerReader | None = None,
) -> GuardedAnswer:
    """The single answer ``completion`` commits to, after the guards (see module docstring).

    ``read`` is the task's reading of an answer text, used by the ``prompt_copy`` guard to
    tell a restated question from an answer taken from it.
    """
    guards = guards or Guards()
    if guards.max_tokens is not None and approx_token_count(completion) > guards.max_tokens:
        return GuardedAnswer(None, "too_long")
    scan = scan_answers(completion)
    if guards.malformed_answer and not scan.tags_pair_up:
        return GuardedAnswer(None, "malformed_answer")
    containers, in_reasoning = scan.containers, scan.in_reasoning()
    if in_reasoning and guards.answer_in_think:
        return GuardedAnswer(None, "answer_in_think")
    if len(in_reasoning) < len(containers):  # switched off: what the reasoning holds does not count
        containers = [span for span in containers if span not in in_reasoning]
    if guards.multiple_answers and len(containers) > 1:
        return GuardedAnswer(None, "multiple_answers")
    if not containers:
        if guards.untagged_answer:
            return GuardedAnswer(None, "untagged_answer")
        answer = completion[scan.reasoning_end :]
    else:
        answer = containers[-1].content
    if not answer.strip():
        return GuardedAnswer(None, "empty_answer" if guards.empty_answer else None)
    if guards.prompt_copy and problem and _answer_rests_on_copy(answer, problem, guards.copy_min_words, read):
        return GuardedAnswer(None, "prompt_copy")
    return GuardedAnswer(answer)


def single_answer(text: str) -> str:
    """A ground-truth solution's answer: the content of its one answer tag, or the whole text
    when it has none; ValueError when its tags are ambiguous (several, unclosed, stray)."""
    tags, pair_up = tag_spans(text, ANSWER_TAG)
    if not pair_up or len(tags) > 1:
        raise ValueError(f"ambiguous solution {text!r}: it needs exactly one well-formed <{ANSWER_TAG}> tag")
    return tags[0].content if tags else text


def _answer_rests_on_copy(answer: str, problem: str, min_words: int, read: AnswerReader | None) -> bool:
    copied = copied_words(answer, problem, min_words=min_words)
    if not copied:
        return False
    if read is None:
        return True
    value = read(answer)
    return value is None or read(_blank_out(answer, copied)) != value


def _word_spans(text: str) -> list[tuple[str, int, int]]:
    return [(match.group().lower(), match.start(), match.end()) for match in re.finditer(r"\w+", text)]


def copied_words(answer: str, problem: str, *, min_words: int) -> list[tuple[int, int]]:
    """Character spans of the answer's words that belong to a run of ``min_words`` consecutive
    question words (all of the question's words if it has fewer); empty if none."""
    problem_words = [word for word, _, _ in _word_spans(problem)]
    window = min(min_words, len(problem_words))
    if window == 0:
        return []
    problem_runs = {tuple(problem_words[i : i + window]) for i in range(len(problem_words) - window + 1)}
    words = _word_spans(answer)
    copied: set[int] = set()
    for i in range(len(words) - window + 1):
        if tuple(word for word, _, _ in words[i : i + window]) in problem_runs:
            copied.update(range(i, i + window))
    return [(words[i][1], words[i][2]) for i in sorted(copied)]


def _blank_out(text: str, spans: list[tuple[int, int]]) -> str:
    for start, end in reversed(spans):
        text = text[:start] + " " * (end - start) + text[end:]
    return text
