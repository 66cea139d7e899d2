"""Fenced code blocks in a completion, found by a linear scan (no regular expression to backtrack).

A block opens with three backticks, an info string of nothing but spaces, tabs and at most one of
``python``, ``python3`` or ``py``, and a newline; its body runs to the next three backticks. An
opener whose line has no closing fence after it is not a block (nor is any opener after it).
"""

from __future__ import annotations

from typing import NamedTuple

FENCE = "```"
LANGUAGES = frozenset({"", "python", "python3", "py"})


class Block(NamedTuple):
    """One fenced block: ``text[start:end]`` is the whole block, fences included; ``body`` its code."""

    start: int
    end: int
    body: str


def fenced_blocks(text: str) -> list[Block]:
    """The fenced Python blocks of ``text``, left to right, in time linear in its length."""
    blocks: list[Block] = []
    position = 0
    while (opener := text.find(FENCE, position)) >= 0:
        newline = text.find("\n", opener + len(FENCE))
        if newline < 0:
            break
        opener = text.rfind(FENCE, opener, newline)  # the line's last fence is the only one an info string can follow
        if text[opener + len(FENCE):newline].strip(" \t") not in LANGUAGES:
            position = newline + 1
            continue
        closer = text.find(FENCE, newline + 1)
        if closer < 0:
            break
        blocks.append(Block(opener, closer + len(FENCE), text[newline + 1:closer]))
        position = closer + len(FENCE)
    return blocks
