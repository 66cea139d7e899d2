"""zoom_texture: the answer is invisible at the model's budget and plain in a zoom; its rewards and its
demonstration (a zoom on the quadrant, then the answer)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from data_recipes.generators import GENERATORS, example_rng
from data_recipes.generators.zoom_texture import QUADRANTS, quadrant_box
from processors import MODALITIES
from processors.image import ImageBudget
from tasks import get_task
from tasks.base import ModelInfo
from tasks.zoom_texture import texture_accuracy, zoom_on_region

TINY_BUDGET = ImageBudget(min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28)  # the tiny Qwen-VLs': 112 x 112


def generated(index: int, **options):
    example = GENERATORS.get("zoom_texture")(**options).example(example_rng(0, index))
    return example.fields, Image.open(io.BytesIO(example.media.data))


def texture_spread(**options) -> float:
    """How far apart (grey levels of 255, at most over pixels) the shrunk top-left quadrants of the three textures
    are, averaged over examples; and checks that the zoomed quadrant shows its texture in black and white."""
    load = MODALITIES.get("image").load
    shrunk = {}  # texture -> the shrunk top-left quadrants of that texture
    for index in range(24):
        fields, image = generated(index, **options)
        small = np.asarray(load(image, TINY_BUDGET), dtype=float)[..., 0]
        assert small.shape == (112, 112)
        shrunk.setdefault(fields["textures"]["top-left"], []).append(small[:56, :56])
        crop = np.asarray(load(image.crop(tuple(fields["region"])), TINY_BUDGET), dtype=float)[..., 0]
        assert crop.shape == (112, 112) and crop[16:-16, 16:-16].std() > 100  # black and white, seen whole
    means = [np.mean(quadrants, 0) for quadrants in shrunk.values()]
    assert len(means) == 3
    return max(np.abs(a - b).max() for a in means for b in means)


def test_at_the_models_budget_every_texture_is_the_same_grey_and_a_zoom_shows_it():
    assert texture_spread() <= 3


def test_without_the_fade_the_quadrants_edges_would_tell_the_textures_apart():
    """The fade is what hides the answer: with none, shrunk quadrants differ by tens of grey levels at their edges."""
    assert texture_spread(fade_px=0) > 10


def test_the_rewards_read_the_answer_and_the_first_zoom():
    fields = {"region": [[112, 0, 224, 112]] * 3, "image_size": [[224, 224]] * 3, "resized_size": [[112, 112]] * 3,
              "coords": ["absolute_resized"] * 3}
    on_region = '<tool_call>{"name": "zoom_in", "arguments": {"bbox_2d": [56, 0, 112, 56]}}</tool_call>'
    elsewhere = on_region.replace("[56, 0, 112, 56]", "[0, 56, 56, 112]")
    completions = [f"{on_region}<answer>checks</answer>", f"{elsewhere}{on_region}<answer>vertical</answer>",
                   "<answer>checks</answer><answer>vertical</answer>"]
    assert zoom_on_region(completions, **fields) == [1.0, 0.0, 0.0]  # the first zoom counts
    assert texture_accuracy(completions, ["checks", "checks", "checks"]) == [1.0, 0.0, 0.0]  # two answers: none


@pytest.mark.parametrize("family, coords", [("qwen2_5_vl", "absolute_resized"), ("qwen2_vl", "norm1000")])
def test_the_demonstration_zooms_on_the_named_quadrant_in_the_familys_coordinates_then_answers(family, coords):
    task = get_task("zoom_texture", model=ModelInfo(family, TINY_BUDGET))
    for index in range(8):
        fields, image = generated(index)
        sample = task.to_sample({**fields, "id": str(index), "image": image}, think=False)
        assert sample.extra["coords"] == coords and "zoom_in" in sample.user_text()
        turns = task.reference_turns(sample)
        assert len(turns) == 2 and "<tool_call>" in turns[0]
        whole = "".join(turns)
        one = {key: [sample.extra[key]] for key in ("region", "image_size", "resized_size", "coords")}
        assert zoom_on_region([whole], **one) == [1.0]
        assert texture_accuracy([whole], [sample.answer]) == [1.0]
    plain = get_task("zoom_texture", model=ModelInfo(family, TINY_BUDGET), zoom=False)
    sample = plain.to_sample({**fields, "id": "x", "image": image}, think=False)
    assert plain.reference_turns(sample) == [f"<answer>{fields['answer']}</answer>"]
    assert "zoom_in" not in sample.user_text()


def test_every_quadrant_is_asked_about():
    asked = {generated(index)[0]["quadrant"] for index in range(40)}
    assert asked == set(QUADRANTS) and quadrant_box("bottom-right", 224) == [112, 112, 224, 224]
