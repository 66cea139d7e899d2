"""Pulling answers out of model completions: tags, ``\\boxed{}``, integers, number words.

Pure string functions shared by every task. None of them raises on malformed model
output: "nothing found" is an empty list or ``None``.
"""

from __future__ import annotations

import re
import unicodedata

ANSWER_TAG = "answer"
THINK_TAG = "think"

_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
NUMBER_WORDS: dict[str, int] = {word: value for value, word in enumerate(_UNITS)}
NUMBER_WORDS.update({word: 20 + 10 * index for index, word in enumerate(_TENS)})


def tag_contents(text: str, tag: str) -> list[str]:
    """The text after each opening ``<tag>`` up to the next closing ``</tag>``.

    One entry per opening tag that has a closing tag after it, so nested or repeated
    tags give several entries (``"<a><a>3</a></a>"`` -> ``["<a>3", "3"]``) and the
    caller can tell "one answer" from "several". Unclosed tags give nothing.
    """
    opening, closing = f"<{tag}>", f"</{tag}>"
    contents = []
    for match in re.finditer(re.escape(opening), text):
        end = text.find(closing, match.end())
        if end >= 0:
            contents.append(text[match.end() : end])
    return contents


def count_tags(text: str, tag: str) -> tuple[int, int]:
    """How many opening and closing ``tag`` markers ``text`` holds."""
    return text.count(f"<{tag}>"), text.count(f"</{tag}>")


def boxed_contents(text: str) -> list[str]:
    """The contents of every ``\\boxed{...}`` in ``text``, braces balanced, in order."""
    contents = []
    for match in re.finditer(r"\\boxed\s*\{", text):
        depth, start = 1, match.end()
        for index in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            if depth == 0:
                contents.append(text[start:index])
                break
    return contents


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
    Anything else -- a sign, a decimal point, units, punctuation, two numbers -- is None.
    """
    stripped = ascii_digits(text).strip()
    if re.fullmatch(r"[0-9]+", stripped):
        return int(stripped)
    return parse_number_words(stripped) if allow_words else None


def normalize_space(text: str) -> str:
    """Lower-case ``text`` and collapse runs of whitespace to one space."""
    return " ".join(text.lower().split())
