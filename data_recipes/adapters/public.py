"""Adapters for column-per-field public datasets: CLEVR-70k, R1-V/SuperCLEVR, geometry3k, canonical."""

from __future__ import annotations

from typing import Any, Mapping

from data_recipes.adapters.base import Row, answer_value, field, register_adapter, strip_media_tokens
from data_recipes.media import MEDIA_COLUMNS

# what our own rows may hold beside problem and answer: media, the fields tasks read, what generators record
CANONICAL_FIELDS = (
    *MEDIA_COLUMNS, "choices", "reasoning", "solution", "tests", "entry_point", "objects", "image_size",
    "resized_size", "task", "target", "count_target", "start", "steps", "beeps", "sample_rate", "kind", "fps",
    "num_frames", "quadrant", "region", "textures",
)

@register_adapter("clevr70k", columns=("image", "problem", "solution"))
def clevr70k(raw: Mapping[str, Any]) -> Row:
    """``leonardPKU/clevr_cogen_a_train``: ``image``, ``problem``, ``solution`` = "<answer> 3 </answer>"."""
    solution = field(raw, "solution")
    return {
        "problem": field(raw, "problem"),
        "answer": answer_value(solution),
        "solution": solution,
        "image": field(raw, "image"),
    }


@register_adapter("r1v_jsonl", columns=("image_path", "question", "ground_truth"))
def r1v_jsonl(raw: Mapping[str, Any]) -> Row:
    """R1-V / SuperCLEVR eval jsonl: ``image_path``, ``question``, ``ground_truth``."""
    return {
        "problem": field(raw, "question"),
        "answer": answer_value(field(raw, "ground_truth")),
        "image": field(raw, "image_path"),
    }


@register_adapter("geometry3k", columns=("images", "problem", "answer"), optional=("choices",))
def geometry3k(raw: Mapping[str, Any]) -> Row:
    """geometry3k: ``images`` list, ``problem`` with ``<image>`` placeholders, ``answer``, maybe ``choices``."""
    row = {
        "problem": strip_media_tokens(field(raw, "problem")),
        "answer": answer_value(field(raw, "answer")),
        "images": list(field(raw, "images")),
    }
    if raw.get("choices"):  # option texts, for letter answers (tasks.geometry grades both)
        row["choices"] = list(raw["choices"])
    return row


@register_adapter("canonical", columns=("problem", "answer"), optional=CANONICAL_FIELDS)
def canonical(raw: Mapping[str, Any]) -> Row:
    """Our own rows (e.g. ``mmgrpo data make`` output): kept as they are, required fields checked."""
    field(raw, "problem")
    field(raw, "answer")
    return dict(raw)
