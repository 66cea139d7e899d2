"""``zoom_texture``: which texture fills the quadrant the question names? Seen whole, the image is too small to
tell (:mod:`data_recipes.generators.zoom_texture`): the policy answers right by calling ``zoom_in`` on the
quadrant and reading the crop. A task where tools pay off, to train and measure multi-turn tool use on CPU.

Rows: ``problem``, ``answer`` (``horizontal``, ``vertical`` or ``checks``), ``image``, ``quadrant``, ``region``
(its box ``[x1, y1, x2, y2]`` in pixels of the image as written) and ``image_size``. With ``zoom`` (the default)
the prompt shows the tool call and the cold-start demonstration makes it, on the quadrant's box in the model
family's coordinates, then answers after seeing the crop; without, the prompt and the demonstration answer
directly (the no-tool baseline of the same model and image budget). ``zoom_on_region`` reports the share of
completions whose first call run was a zoom that went through on the named quadrant (a metric, weight 0 by
default): the region the tool cropped, not the box as written, must overlap the quadrant at IoU > 0.5.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mmgrpo.types import Sample
from processors import MediaError
from processors.image import budget_size
from tasks.base import RowError, Task, require
from tasks.grounding import (
    COORDINATE_SYSTEMS, FAMILY_COORDINATES, OTHER_FAMILIES_COORDINATES, box_iou, original_size, written_box,
)
from tasks.guards import Guards, guarded_answer
from tasks.registry import register_reward, register_task
from tasks.tools.builtin import zoomed_region

TEXTURES = ("horizontal", "vertical", "checks")
ZOOM_HIT_IOU = 0.5
"""A zoom "covers the quadrant" when its box (in original pixels) overlaps the quadrant's at IoU > this."""


def _read_texture(answer_text: str) -> str | None:
    word = answer_text.strip().lower()
    return word if word in TEXTURES else None


@register_reward("texture_accuracy")
def texture_accuracy(completions: Sequence[str], answer: Sequence[str], problem: Sequence[str] | None = None, *,
                     guards: Guards | Mapping[str, Any] | bool | None = None, **_) -> list[float]:
    """1 where the one answer names the quadrant's texture."""
    guards = Guards.coerce(guards)
    problems = problem if problem is not None else [None] * len(completions)
    scores = []
    for text, truth, question in zip(completions, answer, problems):
        given = guarded_answer(text, question, guards, read=_read_texture).text
        scores.append(float(given is not None and _read_texture(given) == truth))
    return scores


@register_reward("zoom_on_region")
def zoom_on_region(completions: Sequence[str], region: Sequence[Sequence[float]], image_size: Sequence[Sequence[int]],
                   resized_size: Sequence[Sequence[int]], coords: Sequence[str],
                   tool_calls: Sequence[Sequence[Mapping[str, Any]]] | None = None,
                   tool_outcomes: Sequence[Sequence[str]] | None = None, **_) -> list[float]:
    """1 where the first call the rollout ran was a ``zoom_in`` that went through and cropped the named quadrant
    (IoU > :data:`ZOOM_HIT_IOU`); 0 without the rollout's calls (``tool_calls``)."""
    calls = tool_calls if tool_calls is not None else [[] for _ in completions]
    outcomes = tool_outcomes if tool_outcomes is not None else [[] for _ in completions]
    scores = []
    for ran, how, box, size, resized, system in zip(calls, outcomes, region, image_size, resized_size, coords):
        hit = False
        if ran and how and ran[0].get("name") == "zoom_in" and how[0] == "ok":
            cropped = zoomed_region(ran[0]["arguments"]["bbox_2d"], system, tuple(size), tuple(resized))
            hit = cropped is not None and box_iou(cropped, tuple(box)) > ZOOM_HIT_IOU
        scores.append(float(hit))
    return scores


@register_task("zoom_texture")
class ZoomTextureTask(Task):
    required_media = "image"
    default_rewards = {"texture_accuracy": 1.0, "zoom_on_region": 0.0}  # zoom_on_region: reported only
    metric_reward = "texture_accuracy"
    guarded_rewards = ("texture_accuracy",)

    def __init__(self, *, zoom: bool = True, **options: Any) -> None:
        super().__init__(**options)
        self.zoom = zoom
        self.coords = FAMILY_COORDINATES.get(self.model.family, OTHER_FAMILIES_COORDINATES)  # as zoom_in reads

    def ground_truth(self, row: Mapping[str, Any]) -> str:
        answer = super().ground_truth(row)
        if answer not in TEXTURES:
            raise RowError(row, "answer", f"{answer!r} is not one of {', '.join(TEXTURES)}")
        return answer

    def task_fields(self, row: Mapping[str, Any]) -> dict[str, Any]:
        size = original_size(row)
        try:
            resized = budget_size(size, self.model.image_budget)
        except MediaError as error:
            raise RowError(row, "image_size", error.reason) from None
        region = require(row, "region")
        if not (isinstance(region, list) and len(region) == 4):
            raise RowError(row, "region", f"a box [x1, y1, x2, y2] in pixels, got {region!r}")
        return {"region": region, "image_size": list(size), "resized_size": list(resized), "coords": self.coords}

    def question(self, row: Mapping[str, Any]) -> str:
        if not self.zoom:
            return super().question(row)
        width, height = original_size(row)
        hint = COORDINATE_SYSTEMS.get(self.coords).hint.format(width=width, height=height)
        call = '<tool_call>{"name": "zoom_in", "arguments": {"bbox_2d": [x1, y1, x2, y2]}}</tool_call>'
        return f"{super().question(row)}\nThe image is shown small: to see a region in detail, first call {call} {hint}."

    def parse(self, answer_text: str) -> str | None:
        return _read_texture(answer_text)

    def reference_turns(self, sample: Sample) -> list[str]:
        """Zooming: the call on the quadrant, then the answer; else the answer alone."""
        if not self.zoom:
            return super().reference_turns(sample)
        extra = sample.extra
        box = json.loads(written_box(extra["region"], self.coords, extra["image_size"], extra["resized_size"]))
        call = {"name": "zoom_in", "arguments": {"bbox_2d": box}}
        return [f"<tool_call>{json.dumps(call)}</tool_call>", self.reference_completion(sample)]
