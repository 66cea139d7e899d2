"""Pulling answers out of model completions: tags, ``\\boxed{}``, integers, number words.

Pure string functions shared by every task. None of them raises on malformed model
output: "nothing found" is an empty list or ``None``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

ANSWER_TAG = "answer"
THINK_TAG = "think"

_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
NUMBER_WORDS: dict[str, int] = {word: value for value, word in enumerate(_UNITS)}
NUMBER_WORDS.update({word: 20 + 10 * index for index, word in enumerate(_TENS)})
# Python's int() refuses text of more digits than its limit (4300 by default, settable down to
# 640): no count or answer is that long, and reading one must not raise.
MAX_INTEGER_DIGITS = 640


@dataclass(frozen=True)
class Span:
    """A container found in a text: ``text[start:end]`` holds it, ``content`` is what it holds."""

    start: int
    end: int
    content: str


def tag_spans(text: str, tag: str) -> tuple[list[Span], bool]:
    """Every ``<tag>...</tag>`` pair in ``text``, and whether the tags pair up cleanly.

    Tags pair up cleanly when they alternate open, close, open, close: an unclosed
    opening tag, a closing tag with nothing open, or a tag opened inside another makes
    the second value False. Pairs are still collected (an opening tag pairs with the
    next closing tag after the innermost open one), for lenient readings.
    """
    spans, opened, clean = [], None, True
    for match in re.finditer(rf"<(/?){re.escape(tag)}>", text):
        if not match.group(1):
            clean = clean and opened is None
            opened = match
        elif opened is None:
            clean = False
        else:
            spans.append(Span(opened.start(), match.end(), text[opened.end() : match.start()]))
            opened = None
    return spans, clean and opened is None


def brace_partners(text: str) -> dict[int, int]:
    """Each ``{`` of ``text`` that closes, by index: the index of the ``}`` that closes it (one pass)."""
    partners, opened = {}, []
    for match in re.finditer(r"[{}]", text):
        if match.group() == "{":
            opened.append(match.start())
        elif opened:
            partners[opened.pop()] = match.start()
    return partners


def boxed_spans(text: str) -> list[Span]:
    """Every ``\\boxed{...}`` in ``text``, braces balanced, in order (an unbalanced one is skipped)."""
    partners, spans = brace_partners(text), []
    for match in re.finditer(r"\\boxed\s*\{", text):
        if (close := partners.get(match.end() - 1)) is not None:
            spans.append(Span(match.start(), close + 1, text[match.end() : close]))
    return spans


def count_tags(text: str, tag: str) -> tuple[int, int]:
    """How many opening and closing ``tag`` markers ``text`` holds."""
    return text.count(f"<{tag}>"), text.count(f"</{tag}>")


def ascii_digits(text: str) -> str:
    """Replace every Unicode decimal digit (``"３"``, ``"٣"``) with its ASCII digit.

    Only category-Nd digits are mapped: superscripts and circled numbers (``"³"``,
    ``"③"``) are left alone, so they never read as plain numbers.
    """
    return "".join(str(unicodedata.digit(char)) if char.isdecimal() else char for char in text)


def parse_number_words(text: str) -> int | None:
    """``"three"`` -> 3, ``"Twenty-one"`` / ``"twenty one"`` -> 21 (0-99); else None."""
    words = re.split(r"[\s-]+", text.strip().lower())
    if len(words) == 1:
        return NUMBER_WORDS.get(words[0])
    if len(words) == 2 and words[0] in _TENS and words[1] in _UNITS[1:10]:
        return NUMBER_WORDS[words[0]] + NUMBER_WORDS[words[1]]
    return None


def parse_integer(text: str, *, allow_words: bool = True) -> int | None:
    """The non-negative integer that ``text`` is, surrounding whitespace allowed; else None.

    Accepts ASCII or Unicode decimal digits and (``allow_words``) English number words.
    Anything else -- a sign, a decimal point, units, punctuation, two numbers -- is None, and so
    is a number of more than :data:`MAX_INTEGER_DIGITS` digits (``int()`` refuses such text).
    """
    stripped = ascii_digits(text).strip()
    if re.fullmatch(r"[0-9]+", stripped):
        digits = stripped.lstrip("0") or "0"
        return int(digits) if len(digits) <= MAX_INTEGER_DIGITS else None
    return parse_number_words(stripped) if allow_words else None


def normalize_space(text: str) -> str:
    """Lower-case ``text`` and collapse runs of whitespace to one space."""
    return " ".join(text.lower().split())


_LATEX_WRAPPER = re.compile(r"\\(?:boxed|text|textbf|mathrm|mathbf)\s*\{")
_LEAD_IN = re.compile(r"(?:the\s+)?(?:final\s+|correct\s+)?(?:answer|option|choice)\b(?:\s+is\b)?\s*:?\s*", re.IGNORECASE)


def _unwrap_once(text: str, start: int, end: int, partners: dict[int, int]) -> tuple[int, int]:
    """``text[start:end]`` without one ``$...$`` or LaTeX command braces around all of it, as a new window (else
    the same one); ``partners``: :func:`brace_partners` of ``text``."""
    if end - start > 1 and text[start] == "$" and text[end - 1] == "$":
        return start + 1, end - 1
    wrapper = _LATEX_WRAPPER.match(text, start, end)
    if wrapper is not None and partners.get(wrapper.end() - 1) == end - 1:
        return wrapper.end(), end - 1
    return start, end


def strip_decoration(text: str) -> str:
    """``text`` without what wraps a short answer: ``$...$``, ``\\boxed{}``, ``\\text{}`` (and
    bold/roman) around the whole of it, then a lead-in such as "The answer is", "Option"
    or "Answer:". ``"\\boxed{\\text{B}}"``, ``"Option B"``, ``"The answer is B"`` -> ``"B"``.
    Layers are peeled as a shrinking window on ``text``, in time linear in its length."""
    partners = brace_partners(text)
    start, end, previous = 0, len(text), None
    while (start, end) != previous:
        previous = start, end
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        start, end = _unwrap_once(text, start, end, partners)
        if lead_in := _LEAD_IN.match(text, start, end):
            start = lead_in.end()
    return text[start:end]
