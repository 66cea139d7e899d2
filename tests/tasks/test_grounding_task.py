"""Grounding IoU: one physical box written in three coordinate systems, and the wrong-scale trap."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from processors.budgets import ImageBudget
from tasks import REWARDS, RowError, get_task
from tasks.base import ModelInfo
from tasks.grounding import box_giou, box_iou, parse_box

# A 1000x500 original shown to the model at 392x196: smart_resize under this budget
# (factor 28, at most 280*280 pixels) floors 1000/2.525 and 500/2.525 to multiples of 28.
BUDGET = ImageBudget(min_pixels=56 * 56, max_pixels=280 * 280)
MODEL = ModelInfo(image_budget=BUDGET)
ORIGINAL, RESIZED = (1000, 500), (392, 196)
TRUTH = [200, 100, 400, 300]  # original pixels
# The same physical box as a model writes it in each system (computed by hand).
WRITTEN = {
    "absolute_original": "[200, 100, 400, 300]",
    "absolute_resized": "[78.4, 39.2, 156.8, 117.6]",  # x * 392/1000, y * 196/500
    "norm1000": "[200, 200, 400, 600]",  # x * 1000/1000, y * 1000/500
}
SYSTEMS = sorted(WRITTEN)


def image_file(tmp_path: Path, size: tuple[int, int] = ORIGINAL) -> str:
    path = tmp_path / "scene.png"
    Image.new("RGB", size, (120, 110, 100)).save(path)
    return str(path)


def grounding_sample(tmp_path: Path, coords: str, iou_threshold: float = 0.5, **row):
    task = get_task("grounding", coords=coords, model=MODEL, iou_threshold=iou_threshold)
    base = {"id": "g1", "problem": "Where is the small red circle?", "answer": TRUTH, "image": image_file(tmp_path)}
    return task, task.to_sample({**base, **row})


@pytest.mark.parametrize("written_in", SYSTEMS)
@pytest.mark.parametrize("read_as", SYSTEMS)
def test_same_box_in_every_system_scores_one_and_the_wrong_system_scores_low(
    tmp_path: Path, written_in: str, read_as: str
) -> None:
    task, sample = grounding_sample(tmp_path, read_as)
    assert sample.extra["image_size"] == list(ORIGINAL) and sample.extra["resized_size"] == list(RESIZED)
    completion = f"<think>x</think><answer>{WRITTEN[written_in]}</answer>"
    score = task.metric(completion, sample)
    (iou,) = REWARDS.get("iou")([completion], answer=[sample.answer], **{k: [v] for k, v in sample.extra.items()})
    if written_in == read_as:
        assert iou == pytest.approx(1.0) and score == 1.0
    else:
        assert iou < 0.25 and score == 0.0


def test_partial_overlap_iou_and_accuracy_threshold(tmp_path: Path) -> None:
    task, sample = grounding_sample(tmp_path, "absolute_original")
    fields = {"answer": [sample.answer], **{k: [v] for k, v in sample.extra.items()}}
    half_overlap = "<answer>[300, 100, 500, 300]</answer>"  # intersection 100x200, union 60000 -> 1/3
    assert REWARDS.get("iou")([half_overlap], **fields) == [pytest.approx(1 / 3)]
    assert REWARDS.get("grounding_accuracy")([half_overlap], **fields, threshold=0.3) == [1.0]
    assert REWARDS.get("grounding_accuracy")([half_overlap], **fields) == [0.0]
    lenient = get_task("grounding", coords="absolute_original", model=MODEL, iou_threshold=0.3)
    assert lenient.metric(half_overlap, sample) == 1.0


GROUNDING_TABLE = [
    # (completion in original pixels, expected IoU with TRUTH)
    ('<think>x</think><answer>{"bbox_2d": [200, 100, 400, 300], "label": "circle"}</answer>', 1.0),
    ("<think>x</think><answer>(200,100),(400,300)</answer>", 1.0),  # Qwen2-VL point pairs
    ("<think>x</think><answer> [ 200 , 100 , 400 , 300 ] </answer>", 1.0),
    ("<think>x</think><answer>[２００, 100, 400, 300]</answer>", 1.0),  # full-width digits
    ("<think>x</think><answer>[400, 300, 200, 100]</answer>", 0.0),  # inverted
    ("<think>x</think><answer>[200, 100, 400]</answer>", 0.0),  # three numbers
    ("<think>x</think><answer>[200, 100, 400, 300] [0, 0, 1000, 500]</answer>", 0.0),  # two boxes
    ("[200, 100, 400, 300]", 0.0),  # missing tags
    ("<answer>[200, 100, 400, 300]</answer><answer>[0, 0, 9, 9]</answer>", 0.0),  # two answers
    ("<think>x</think><answer></answer>", 0.0),  # empty
]


@pytest.mark.parametrize("completion, expected", GROUNDING_TABLE)
def test_grounding_table(completion: str, expected: float) -> None:
    fields = {"answer": [TRUTH], "image_size": [ORIGINAL], "resized_size": [RESIZED], "coords": ["absolute_original"]}
    assert REWARDS.get("iou")([completion], **fields) == [pytest.approx(expected)]


def test_box_helpers() -> None:
    assert parse_box("[1, 2, 3.5, 4]") == (1.0, 2.0, 3.5, 4.0)
    assert parse_box("no box") is None
    assert box_iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(50 / 150)
    assert box_iou((0, 0, 0, 10), (0, 0, 0, 10)) == 0.0


def test_generalized_iou_by_hand() -> None:
    assert box_giou((0, 0, 2, 2), (0, 0, 2, 2)) == pytest.approx(1.0)
    assert box_giou((0, 0, 2, 2), (1, 1, 3, 3)) == pytest.approx(1 / 7 - 2 / 9)  # union 7, enclosing 9
    assert box_giou((0, 0, 1, 1), (2, 0, 3, 1)) == pytest.approx(-1 / 3)  # disjoint: union 2, enclosing 3
    assert box_giou((0, 0, 1, 1), (4, 0, 5, 1)) == pytest.approx(-3 / 5)  # farther apart, lower
    assert box_giou((2, 0, 1, 1), (0, 0, 1, 1)) == -1.0  # inverted


def test_giou_reward_ranks_disjoint_boxes_by_distance_where_iou_cannot(tmp_path: Path) -> None:
    task, sample = grounding_sample(tmp_path, "absolute_original")
    fields = {"answer": [sample.answer] * 4, **{k: [v] * 4 for k, v in sample.extra.items()}}
    near, far = "<answer>[410, 100, 610, 300]</answer>", "<answer>[790, 100, 990, 300]</answer>"
    exact, no_box = "<answer>[200, 100, 400, 300]</answer>", "<answer>here</answer>"
    completions = [exact, near, far, no_box]
    assert REWARDS.get("iou")(completions, **fields) == [1.0, 0.0, 0.0, 0.0]
    giou = REWARDS.get("giou")(completions, **fields)
    assert giou[0] == pytest.approx(1.0) and giou[3] == 0.0
    assert giou[0] > giou[1] > giou[2] > giou[3]
    # disjoint, union 80000: enclosing 410 x 200 = 82000 (near) and 790 x 200 = 158000 (far)
    assert giou[1:3] == [pytest.approx((1 - 2000 / 82000) / 2), pytest.approx((1 - 78000 / 158000) / 2)]


@pytest.mark.parametrize("reward", ["iou", "giou", "grounding_accuracy"])
def test_a_box_past_the_float_range_scores_zero_not_nan(reward: str) -> None:
    huge = "9" * 400  # float() reads it as inf: GIoU was inf - inf = NaN
    fields = {"answer": [TRUTH] * 2, "image_size": [ORIGINAL] * 2, "resized_size": [RESIZED] * 2,
              "coords": ["norm1000"] * 2}
    completions = [f"<answer>[0, 0, {huge}, {huge}]</answer>", f"<answer>[{huge}, 0, {huge}, 300]</answer>"]
    assert REWARDS.get(reward)(completions, **fields) == [0.0, 0.0]


def test_prompt_names_the_coordinate_system(tmp_path: Path) -> None:
    prompts = {coords: grounding_sample(tmp_path, coords)[1].messages[-1]["content"][-1]["text"] for coords in SYSTEMS}
    assert "original 1000x500 image" in prompts["absolute_original"]
    assert "0-1000" in prompts["norm1000"]
    assert "0-1000" not in prompts["absolute_resized"] and "original" not in prompts["absolute_resized"]


def test_rows_are_validated(tmp_path: Path) -> None:
    with pytest.raises(RowError, match="'resized_size'"):
        grounding_sample(tmp_path, "absolute_resized", resized_size=[1000, 500])  # sizes for another budget
    _, sample = grounding_sample(tmp_path, "absolute_resized", resized_size=list(RESIZED), image_size=[1000, 500])
    assert sample.extra["resized_size"] == list(RESIZED)
    with pytest.raises(RowError, match="'answer'"):
        grounding_sample(tmp_path, "absolute_resized", answer=[10, 10, 5, 5])
    with pytest.raises(RowError, match="'image'"):
        grounding_sample(tmp_path, "absolute_resized", image=str(tmp_path / "missing.png"))
    with pytest.raises(KeyError, match="unknown coordinate system 'pixels'"):
        get_task("grounding", coords="pixels")


def test_reward_refuses_samples_without_a_coordinate_system() -> None:
    with pytest.raises(ValueError, match="coords"):
        REWARDS.get("iou")(["<answer>[1, 2, 3, 4]</answer>"], answer=[TRUTH], image_size=[ORIGINAL],
                           resized_size=[RESIZED], coords=[None])


def test_task_default_rewards_score_with_the_task_options(tmp_path: Path) -> None:
    from tasks import score_completions

    task, sample = grounding_sample(tmp_path, "norm1000", iou_threshold=0.99)
    result = score_completions([f"<think>x</think><answer>{WRITTEN['norm1000']}</answer>"], [sample],
                               task.default_rewards, reward_options=task.reward_options())
    assert result.components == {"format": [1.0], "iou": [pytest.approx(1.0)], "grounding_accuracy": [1.0]}
    assert task.reward_options(["iou"]) == {"iou": {"guards": task.guards}}
