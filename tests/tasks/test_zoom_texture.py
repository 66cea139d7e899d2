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
from tasks.tools import find_calls
from tasks.zoom_texture import texture_accuracy, zoom_on_region

TINY_BUDGET = ImageBudget(min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28)  # the tiny Qwen-VLs': 112 x 112


def generated(index: int, **options):
    example = GENERATORS.get("zoom_texture")(**options).example(example_rng(0, index))
    return example.fields, Image.open(io.BytesIO(example.media.data))


def probe_accuracy(*, zoomed: bool, **options) -> float:
    """Held-out accuracy of a nearest-centroid probe that reads the top-left quadrant's texture from what the model
    is shown: the whole image at its budget (the quadrant shrunk to 56 x 56), or the zoom into the quadrant."""
    load = MODALITIES.get("image").load
    features, labels = [], []
    for index in range(240):
        fields, image = generated(index, **options)
        if zoomed:
            pixels = np.asarray(load(image.crop(tuple(quadrant_box("top-left", 224))), TINY_BUDGET), dtype=float)
        else:
            pixels = np.asarray(load(image, TINY_BUDGET), dtype=float)[:56, :56]
        features.append(pixels[..., 0].ravel())
        labels.append(fields["textures"]["top-left"])
    features, labels = np.stack(features), np.array(labels)
    train, test = slice(0, 120), slice(120, 240)
    names = sorted(set(labels[train]))
    centroids = np.stack([features[train][labels[train] == name].mean(0) for name in names])
    guesses = np.array(names)[((features[test][:, None] - centroids[None]) ** 2).sum(-1).argmin(1)]
    return float((guesses == labels[test]).mean())


def test_at_the_models_budget_a_probe_cannot_tell_the_textures_and_a_zoom_shows_them():
    assert probe_accuracy(zoomed=False) < 0.5  # chance is 1/3 (120 held-out images)
    assert probe_accuracy(zoomed=True) > 0.95


def test_without_the_noise_the_shrunk_textures_would_give_the_answer_away():
    """The resampling's rounding leaves each texture a fixed pattern of 1-2 grey levels: read perfectly."""
    assert probe_accuracy(zoomed=False, noise_std=0) > 0.95


def test_every_image_is_its_own():
    images = {generated(index)[1].tobytes() for index in range(100)}
    assert len(images) == 100  # 3**4 = 81 without the noise: a test split would repeat training images


def test_the_rewards_read_the_answer_and_the_first_call_run():
    fields = {"region": [[112, 0, 224, 112]] * 6, "image_size": [[224, 224]] * 6, "resized_size": [[112, 112]] * 6,
              "coords": ["absolute_resized"] * 6}
    on_region, elsewhere = {"bbox_2d": [56, 0, 112, 56]}, {"bbox_2d": [0, 56, 56, 112]}
    calls = [[{"name": "zoom_in", "arguments": on_region}],
             [{"name": "zoom_in", "arguments": elsewhere}, {"name": "zoom_in", "arguments": on_region}],
             [{"name": "zoom_in", "arguments": {"bbox_2d": [112, 56, 56, 0]}}],  # corners swapped: cropped all the same
             [{"name": "zoom_in", "arguments": {"bbox_2d": [56, -60, 200, 56]}}],  # clamped to the quadrant
             [{"name": "zoom_in", "arguments": {**on_region, "zoom": 4}}],  # refused: no crop
             []]
    outcomes = [["ok"], ["ok", "ok"], ["ok"], ["ok"], ["bad_arguments"], []]
    assert zoom_on_region([""] * 6, tool_calls=calls, tool_outcomes=outcomes, **fields) == [1, 0, 1, 1, 0, 0]
    completions = ["<answer>checks</answer>", "<answer>checks</answer><answer>vertical</answer>",
                   "<answer>horizontal, vertical or checks</answer>"]
    assert texture_accuracy(completions, ["checks"] * 3, problem=["Which texture: horizontal, vertical or checks?"] * 3) \
        == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("family, coords", [("qwen2_5_vl", "absolute_resized"), ("qwen2_vl", "norm1000")])
def test_the_demonstration_zooms_on_the_named_quadrant_in_the_familys_coordinates_then_answers(family, coords):
    task = get_task("zoom_texture", model=ModelInfo(family, TINY_BUDGET))
    for index in range(8):
        fields, image = generated(index)
        sample = task.to_sample({**fields, "id": str(index), "image": image}, think=False)
        assert sample.extra["coords"] == coords and "zoom_in" in sample.user_text()
        turns = task.reference_turns(sample)
        assert len(turns) == 2 and "<tool_call>" in turns[0]
        (call,) = find_calls(turns[0])
        one = {key: [sample.extra[key]] for key in ("region", "image_size", "resized_size", "coords")}
        assert zoom_on_region(turns, tool_calls=[[call.as_record()]], tool_outcomes=[["ok"]], **one) == [1.0]
        assert texture_accuracy(["".join(turns)], [sample.answer]) == [1.0]
    plain = get_task("zoom_texture", model=ModelInfo(family, TINY_BUDGET), zoom=False)
    sample = plain.to_sample({**fields, "id": "x", "image": image}, think=False)
    assert plain.reference_turns(sample) == [f"<answer>{fields['answer']}</answer>"]
    assert "zoom_in" not in sample.user_text()


def test_every_quadrant_is_asked_about():
    asked = {generated(index)[0]["quadrant"] for index in range(40)}
    assert asked == set(QUADRANTS) and quadrant_box("bottom-right", 224) == [112, 112, 224, 224]
