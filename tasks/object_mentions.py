"""``object_mentions``: a process reward for scenes whose objects the data lists (the procedural
counting generators write each object's colour and shape into the row's ``objects``).

Each line of the reasoning (inside ``<think>`` when there is one) that names coloured shapes
("red square", "two blue circles" names one) is a step: +1 when each shape it names is in the
scene and not yet claimed by an earlier line, -1 when it names one the scene does not have,
or has fewer of than the lines named (a hallucinated or double-counted object). Lines naming
no object are not steps. Each object no line named is one more -1 step, ending where the
reasoning ends: without it, listing nothing would score better than listing with mistakes
(measured: the policy stopped listing). Rows without ``objects`` are not applicable (None).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from data_recipes.generators.scenes import COLOURS, PLURALS
from mmgrpo.types import Span
from tasks.registry import register_reward
from tasks.steps import split_steps

_SINGULAR = {plural: shape for shape, plural in PLURALS.items()} | {shape: shape for shape in PLURALS}
MENTION = re.compile(
    rf"\b({'|'.join(COLOURS)})\s+({'|'.join(sorted(_SINGULAR, key=len, reverse=True))})\b", re.IGNORECASE
)
REAL, HALLUCINATED, MISSED = 1.0, -1.0, -1.0


def mention_steps(completion: str, objects: Sequence[Mapping[str, Any]]) -> list[Span]:
    """The scored lines of ``completion`` against the scene's ``objects`` (dicts with colour and shape)."""
    unclaimed = Counter((str(obj["colour"]).lower(), str(obj["shape"]).lower()) for obj in objects)
    steps = []
    for start, end in split_steps(completion, "lines"):
        mentions = [(colour.lower(), _SINGULAR[shape.lower()]) for colour, shape in MENTION.findall(completion[start:end])]
        if not mentions:
            continue
        real = True
        for mention in mentions:
            real &= unclaimed[mention] > 0
            unclaimed[mention] -= 1
        steps.append((start, end, REAL if real else HALLUCINATED))
    end = _reasoning_end(completion)
    steps += [(end, end, MISSED)] * sum(count for count in unclaimed.values() if count > 0)
    return steps


def _reasoning_end(completion: str) -> int:
    """Where the reasoning ends: the ``</think>`` tag, else the end of the completion."""
    close = completion.find("</think>")
    return close if close >= 0 else len(completion)


@register_reward("object_mentions")
def object_mentions(
    completions: Sequence[str], objects: Sequence[Sequence[Mapping[str, Any]] | None] | None = None, **_
) -> list[list[Span] | None]:
    scenes = objects if objects is not None else [None] * len(completions)
    return [None if scene is None else mention_steps(text, scene) for text, scene in zip(completions, scenes)]
