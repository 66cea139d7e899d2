"""``grounding``: a referring expression -> one bounding box ``[x1, y1, x2, y2]``.

Coordinate systems are explicit, because mixing them up silently ruins the reward
(VLM-R1 issue #44: boxes in resized-image pixels compared with original-image boxes).
A model answers in one of:

- ``absolute_resized``: pixels of the image the model saw, after resizing into the
  model's pixel budget (Qwen2.5-VL);
- ``norm1000``: 0-1000 on both axes (Qwen2-VL, Qwen3-VL);
- ``norm1``: 0-1 on both axes;
- ``absolute_original``: pixels of the original image.

The ``coords`` option picks one; by default it follows the model family
(:data:`FAMILY_COORDINATES`, ``norm1`` for other families).

Rows: ``id``, ``problem`` (the expression or question), ``answer`` (the box in ORIGINAL
image pixels, a list or ``"[x1, y1, x2, y2]"``, finite numbers), ``image``, optional
``image_size`` (``[width, height]`` of the original; read from the file when absent).
The task derives ``resized_size`` (``[width, height]``) with the batch builder's own
resize (:func:`processors.image.budget_size`) under the model's image budget
(:class:`tasks.base.ModelInfo`), and rejects a row whose own ``resized_size`` disagrees.
Rewards convert the predicted box into original pixels, then compare: ``iou`` (the
intersection over union) and ``grounding_accuracy`` (IoU above ``threshold``). The
answer must hold exactly one box (``[...]`` of four numbers -- also inside Qwen2.5-VL's
``[{"bbox_2d": [...], "label": "..."}]`` -- or Qwen2-VL's ``(x1,y1),(x2,y2)``); none or
several score 0.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from PIL import Image

from mmgrpo.registry import Registry
from mmgrpo.types import Sample
from processors.errors import MediaError
from processors.image import budget_size
from tasks.base import RowError, Task, require
from tasks.guards import Guards, guarded_answer
from tasks.parsing import ascii_digits
from tasks.registry import register_reward, register_task

Box = tuple[float, float, float, float]  # x1, y1, x2, y2
Size = tuple[int, int]  # width, height
CoordinateName = Literal["absolute_resized", "norm1000", "norm1", "absolute_original"]
# The coordinate system each model family was trained to answer in (model_type -> system).
FAMILY_COORDINATES: dict[str, CoordinateName] = {
    "qwen2_5_vl": "absolute_resized",
    "qwen2_vl": "norm1000",
    "qwen3_vl": "norm1000",
    "qwen3_vl_moe": "norm1000",
    "qwen3_5": "norm1000",  # as Qwen3-VL
    "qwen3_5_moe": "norm1000",
    "qwen3_omni_moe_thinker": "norm1000",  # Qwen3-VL's vision tower and processor (no grounding format of its own)
    # GLM-V writes boxes as <|begin_of_box|>[x1,y1,x2,y2]<|end_of_box|>, each 0-1000
    "glm4v": "norm1000",
    "glm4v_moe": "norm1000",
    "glm46v": "norm1000",
}
OTHER_FAMILIES_COORDINATES: CoordinateName = "norm1"

_NUMBER = r"\s*(-?\d+(?:\.\d+)?)\s*"
_BRACKET_BOX = re.compile(rf"\[{_NUMBER},{_NUMBER},{_NUMBER},{_NUMBER}\]")
_POINT_PAIR_BOX = re.compile(rf"\({_NUMBER},{_NUMBER}\)\s*,?\s*\({_NUMBER},{_NUMBER}\)")


@dataclass(frozen=True)
class CoordinateSystem:
    """How a model writes boxes: the conversion to original pixels and the prompt hint."""

    scale: Callable[[Size, Size], tuple[float, float]]  # (original, resized) -> original units per model unit
    hint: str
    decimals: int = 0  # how finely a reference answer writes coordinates


COORDINATE_SYSTEMS: Registry[CoordinateSystem] = Registry("coordinate system")
COORDINATE_SYSTEMS.add("absolute_original", CoordinateSystem(
    lambda original, resized: (1.0, 1.0),
    "in pixel coordinates of the original {width}x{height} image",
))
COORDINATE_SYSTEMS.add("absolute_resized", CoordinateSystem(
    lambda original, resized: (original[0] / resized[0], original[1] / resized[1]),
    "in pixel coordinates of the image",
))
COORDINATE_SYSTEMS.add("norm1000", CoordinateSystem(
    lambda original, resized: (original[0] / 1000.0, original[1] / 1000.0),
    "with coordinates normalised to 0-1000",
))
COORDINATE_SYSTEMS.add("norm1", CoordinateSystem(
    lambda original, resized: (float(original[0]), float(original[1])),
    "with coordinates normalised to 0-1",
    decimals=3,
))


def to_original_pixels(box: Box, coords: str, original_size: Size, resized_size: Size) -> Box:
    """``box`` written in ``coords`` for an image of ``original_size`` shown at ``resized_size``, in original pixels."""
    sx, sy = COORDINATE_SYSTEMS.get(coords).scale(tuple(original_size), tuple(resized_size))
    x1, y1, x2, y2 = box
    return (x1 * sx, y1 * sy, x2 * sx, y2 * sy)


def parse_box(text: str) -> Box | None:
    """The one box in ``text`` (``[x1,y1,x2,y2]`` or ``(x1,y1),(x2,y2)``); None if none or several."""
    text = ascii_digits(text)
    found = _BRACKET_BOX.findall(text) + _POINT_PAIR_BOX.findall(text)
    return tuple(float(value) for value in found[0]) if len(found) == 1 else None


def box_iou(a: Box, b: Box) -> float:
    """Intersection over union of two boxes; 0 if either is empty or inverted."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    area_a = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])
    area_b = max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])
    if width <= 0 or height <= 0 or area_a == 0 or area_b == 0:
        return 0.0
    intersection = width * height
    return intersection / (area_a + area_b - intersection)


def box_giou(a: Box, b: Box) -> float:
    """Generalized IoU (Rezatofighi et al. 2019): IoU minus the share of the boxes' enclosing box
    that neither covers, in [-1, 1]; it keeps falling as disjoint boxes move apart, where IoU is
    flat at 0. An empty or inverted box scores -1."""
    if a[2] <= a[0] or a[3] <= a[1] or b[2] <= b[0] or b[3] <= b[1]:
        return -1.0
    iou = box_iou(a, b)
    intersection_w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    intersection_h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - intersection_w * intersection_h
    enclosing = (max(a[2], b[2]) - min(a[0], b[0])) * (max(a[3], b[3]) - min(a[1], b[1]))
    return iou - (enclosing - union) / enclosing


def ground_truth_box(answer: Any) -> Box:
    """The ground-truth box (list of four numbers or its JSON text); ValueError otherwise."""
    values = json.loads(answer) if isinstance(answer, str) else answer
    if not isinstance(values, (list, tuple)) or len(values) != 4:
        raise ValueError(f"ground-truth box must be [x1, y1, x2, y2], got {answer!r}")
    box = tuple(float(value) for value in values)
    if not all(math.isfinite(value) for value in box):
        raise ValueError(f"ground-truth box {list(box)} has a non-finite coordinate")
    if box[2] <= box[0] or box[3] <= box[1]:
        raise ValueError(f"ground-truth box {list(box)} is empty or inverted")
    return box


def _ious(
    completions: Sequence[str],
    answer: Sequence[Any],
    problem: Sequence[str | None] | None,
    image_size: Sequence[Size],
    resized_size: Sequence[Size],
    coords: Sequence[str],
    guards: Guards | Mapping[str, Any] | bool | None,
    overlap: Callable[[Box, Box], float] = box_iou,
) -> list[float]:
    """``overlap`` (IoU) of each completion's box, in original pixels, with its ground truth
    (0 if the completion has none, or one with a coordinate past the float range)."""
    guards = Guards.coerce(guards)
    items = zip(completions, answer, problem or [None] * len(completions), image_size, resized_size, coords)
    scores = []
    for text, truth, question, original, resized, system in items:
        if system is None:
            raise ValueError("the sample has no 'coords' field: the coordinate system of its boxes is unknown")
        answer_text = guarded_answer(text, question, guards, read=parse_box).text
        box = None if answer_text is None else parse_box(answer_text)
        predicted = None if box is None else to_original_pixels(box, system, original, resized)
        finite = predicted is not None and all(map(math.isfinite, predicted))  # 400 digits overflow to inf
        scores.append(overlap(predicted, ground_truth_box(truth)) if finite else 0.0)
    return scores


def unit_giou(a: Box, b: Box) -> float:
    """:func:`box_giou` rescaled to [0, 1], so that a missing box (scored 0) ranks lowest."""
    return (box_giou(a, b) + 1.0) / 2.0


def _overlap_reward(overlap: Callable[[Box, Box], float], doc: str) -> Callable[..., list[float]]:
    """A reward scoring each completion's box by ``overlap`` with the ground truth (0 without a box)."""

    def reward(
        completions: Sequence[str],
        answer: Sequence[Any],
        image_size: Sequence[Size],
        resized_size: Sequence[Size],
        coords: Sequence[str],
        problem: Sequence[str | None] | None = None,
        *,
        guards: Guards | Mapping[str, Any] | bool | None = None,
        **_,
    ) -> list[float]:
        return _ious(completions, answer, problem, image_size, resized_size, coords, guards, overlap)

    reward.__doc__ = doc
    return reward


iou_reward = register_reward("iou")(_overlap_reward(box_iou, "IoU of the answered box with the ground truth."))
giou_reward = register_reward("giou")(_overlap_reward(
    unit_giou,
    "Generalized IoU rescaled to [0, 1]: a dense signal for a policy whose boxes do not yet overlap "
    "the target, where IoU gives every sample 0.",
))


@register_reward("grounding_accuracy")
def grounding_accuracy(completions: Sequence[str], *, threshold: float = 0.5, **fields: Any) -> list[float]:
    """1.0 where the answered box's IoU with the ground truth exceeds ``threshold`` (the fields as ``iou`` takes them)."""
    return [float(value > threshold) for value in iou_reward(completions, **fields)]


def original_size(row: Mapping[str, Any]) -> Size:
    """``[width, height]`` of the row's original image: its ``image_size`` column or the file header."""
    if row.get("image_size") is not None:
        width, height = row["image_size"]
        return int(width), int(height)
    image = require(row, "image")
    try:
        return image.size if isinstance(image, Image.Image) else Image.open(image).size
    except (OSError, ValueError) as error:
        raise RowError(row, "image", f"cannot read the image size: {error}") from None


@register_task("grounding")
class GroundingTask(Task):
    default_rewards = {"format": 0.1, "iou": 1.0, "grounding_accuracy": 0.0}  # accuracy: reported only
    metric_reward = "grounding_accuracy"
    guarded_rewards = ("iou", "grounding_accuracy")
    required_media = "image"

    def __init__(self, *, coords: CoordinateName | None = None, iou_threshold: float = 0.5, **options) -> None:
        super().__init__(**options)
        self.coords = coords or FAMILY_COORDINATES.get(self.model.family, OTHER_FAMILIES_COORDINATES)
        COORDINATE_SYSTEMS.get(self.coords)  # fail now, naming the known systems
        self.iou_threshold = iou_threshold

    def resized_size(self, size: Size) -> Size:
        """``[width, height]`` the batch builder resizes an image of ``size`` to for this model."""
        return budget_size(size, self.model.image_budget)

    def ground_truth(self, row: Mapping[str, Any]) -> list[float]:
        try:
            return list(ground_truth_box(super().ground_truth(row)))
        except (ValueError, TypeError) as error:
            raise RowError(row, "answer", str(error)) from None

    def task_fields(self, row: Mapping[str, Any]) -> dict[str, Any]:
        size = original_size(row)
        try:
            resized = self.resized_size(size)
        except MediaError as error:
            raise RowError(row, "image_size", error.reason) from None
        if row.get("resized_size") is not None and tuple(row["resized_size"]) != resized:
            reason = f"{list(row['resized_size'])} but the image budget gives {list(resized)}"
            raise RowError(row, "resized_size", reason)
        return {"image_size": list(size), "resized_size": list(resized), "coords": self.coords}

    def question(self, row: Mapping[str, Any]) -> str:
        width, height = original_size(row)
        hint = COORDINATE_SYSTEMS.get(self.coords).hint.format(width=width, height=height)
        return f"{super().question(row)}\nGive its bounding box as [x1, y1, x2, y2] {hint}."

    def reward_options(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        options = super().reward_options(names)
        if "grounding_accuracy" in options:
            options["grounding_accuracy"]["threshold"] = self.iou_threshold
        return options

    def parse(self, answer_text: str) -> Box | None:
        return parse_box(answer_text)

    def format_answer(self, sample: Sample) -> str:
        """The ground-truth box in the coordinate system the prompt asks for."""
        extra = sample.extra
        return written_box(sample.answer, self.coords, extra["image_size"], extra["resized_size"])


def written_box(box: Box, coords: str, original_size: Size, resized_size: Size) -> str:
    """``box`` (original pixels) as a model writes it in ``coords``, rounded as the system's ``decimals`` say
    (whole pixels or thousandths; three decimals for 0-1)."""
    sx, sy = COORDINATE_SYSTEMS.get(coords).scale(tuple(original_size), tuple(resized_size))
    digits = COORDINATE_SYSTEMS.get(coords).decimals or None
    x1, y1, x2, y2 = (round(value / scale, digits) for value, scale in zip(box, (sx, sy, sx, sy)))
    return f"[{x1}, {y1}, {x2}, {y2}]"
