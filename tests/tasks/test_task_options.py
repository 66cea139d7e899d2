"""task.options and task.guards reach every task; grounding sees images at the size the model sees them.

The grounding checks go through the path a run takes: a config (model pixel budget,
task options) -> ``load_samples`` -> samples, compared with the size the batch builder
really resizes each image to (``load_image`` under the run's ``media_budgets``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from mmgrpo.config import load_config
from mmgrpo.models.loading import load_processor
from mmgrpo.inputs import build_task, load_samples, media_budgets, task_model_info
from processors import ImageBudget, load_image
from tasks import REWARDS, TASKS, RowError, get_task
from tasks.base import ModelInfo
from tasks.grounding import FAMILY_COORDINATES

TRUTH = (0.25, 0.2, 0.75, 0.6)  # the box as fractions of the image: x1, y1, x2, y2
# Image sizes and pixel budgets seen in practice: the tiny default (3136..12544 pixels) and R1-V's 401408.
CASES = [((200, 200), 56 * 56, 112 * 112), ((1024, 768), 56 * 56, 401408), ((1920, 1080), 56 * 56, 401408),
         ((333, 517), 128 * 28 * 28, 256 * 28 * 28)]
ROOMY = {"min_pixels": 56 * 56, "max_pixels": 16384 * 28 * 28}  # a tiny model whose processor takes all these budgets


def written_box(coords: str, original: tuple[int, int], seen: tuple[int, int]) -> str:
    """The true box as a model writes it in ``coords`` for an image shown at ``seen``."""
    width, height = {"absolute_resized": seen, "norm1000": (1000, 1000), "norm1": (1, 1)}[coords]
    x1, y1, x2, y2 = TRUTH
    return f"[{x1 * width:.4f}, {y1 * height:.4f}, {x2 * width:.4f}, {y2 * height:.4f}]"


def grounding_dataset(root: Path, sizes: list[tuple[int, int]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for index, (width, height) in enumerate(sizes):
        Image.new("RGB", (width, height), (90, 120, 150)).save(root / f"{index}.png")
        box = [TRUTH[0] * width, TRUTH[1] * height, TRUTH[2] * width, TRUTH[3] * height]
        rows.append({"id": f"g{index}", "problem": "the blue window on the left", "answer": box, "image": f"{index}.png"})
    (root / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return root


def run_config(data: Path, min_pixels: int, max_pixels: int, *overrides: str):
    return load_config(None, [
        "task.name=grounding", "task.think=true", f"model.min_pixels={min_pixels}", f"model.max_pixels={max_pixels}",
        f"data.train=[{{path: {data}, split: train}}]", *overrides,
    ])


@pytest.mark.parametrize("size, min_pixels, max_pixels", CASES)
@pytest.mark.parametrize("coords", ["absolute_resized", "norm1000", "norm1"])
def test_a_perfect_box_scores_one_under_the_model_budget(
    tmp_path: Path, tiny_model_dir, size, min_pixels: int, max_pixels: int, coords: str
) -> None:
    tiny_qwen25vl = tiny_model_dir("qwen2_5_vl", **ROOMY)
    config = run_config(grounding_dataset(tmp_path / "data", [size]), min_pixels, max_pixels,
                        f"task.options={{coords: {coords}}}")
    train = load_samples(config.data.train, config.task, tmp_path, seed=0,
                         model=task_model_info(config.model, str(tiny_qwen25vl)))
    (sample,) = train.samples
    seen = load_image(sample.media("image")[0], media_budgets(config.model, load_processor(str(tiny_qwen25vl)))["image"])
    assert tuple(sample.extra["resized_size"]) == seen.size  # what the batch builder shows the model
    task = train.tasks["grounding"]
    assert task.metric(f"<think>x</think><answer>{written_box(coords, size, seen.size)}</answer>", sample) == 1.0
    assert task.metric(f"<think>x</think><answer>{task.format_answer(sample)}</answer>", sample) == 1.0


@pytest.mark.parametrize(
    "family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "glm4v", "qwen3_omni_moe_thinker"]
)
def test_the_coordinate_system_follows_the_model_family(tmp_path: Path, tiny_model_dir, family: str) -> None:
    data = grounding_dataset(tmp_path / "data", [(640, 480)])
    config = run_config(data, 56 * 56, 112 * 112)
    model_dir = tiny_model_dir(family, **ROOMY)
    train = load_samples(config.data.train, config.task, tmp_path, seed=0,
                         model=task_model_info(config.model, str(model_dir)))
    (sample,) = train.samples
    budget = media_budgets(config.model, load_processor(str(model_dir)))["image"]
    assert sample.extra["coords"] == FAMILY_COORDINATES[family]
    assert tuple(sample.extra["resized_size"]) == load_image(sample.media("image")[0], budget).size
    completion = written_box(sample.extra["coords"], (640, 480), tuple(sample.extra["resized_size"]))
    assert train.tasks["grounding"].metric(f"<think>x</think><answer>{completion}</answer>", sample) == 1.0


def test_other_families_default_to_normalised_coordinates() -> None:
    assert get_task("grounding", model=ModelInfo(family="smolvlm")).coords == "norm1"
    assert get_task("grounding", model=ModelInfo(family="qwen2_vl"), coords="norm1").coords == "norm1"


def test_qwen25vl_native_grounding_output_that_restates_the_expression_is_graded(tmp_path: Path) -> None:
    image = tmp_path / "scene.png"
    Image.new("RGB", (400, 300)).save(image)
    task = get_task("grounding", coords="absolute_original", model=ModelInfo(image_budget=ImageBudget()))
    problem = "the man in the red shirt standing on the left"
    sample = task.to_sample({"id": "q", "problem": problem, "answer": [40, 30, 200, 270], "image": str(image)})
    native = f'[{{"bbox_2d": [40, 30, 200, 270], "label": "{problem}"}}]'
    restated = f"The {problem} is at [40, 30, 200, 270]."
    for answer in (native, restated):
        assert task.metric(f"<think>x</think><answer>{answer}</answer>", sample) == 1.0
    assert task.metric(f"<think>x</think><answer>{problem}</answer>", sample) == 0.0


@pytest.mark.parametrize("answer", [[float("nan"), 1, 5, 5], [0, 0, float("inf"), 5], "[0, 0, Infinity, 5]", "[NaN, 1, 2, 3]"])
def test_non_finite_ground_truth_boxes_are_rejected_at_load(tmp_path: Path, answer) -> None:
    row = {"id": "nan-box", "problem": "the door", "answer": answer, "image": "/x.png", "image_size": [10, 10]}
    with pytest.raises(RowError, match="'nan-box'.*'answer'.*non-finite"):
        get_task("grounding").to_sample(row)


def test_unknown_task_options_are_rejected_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"task 'grounding' has no option\(s\) \['coord'\].*'coords'"):
        get_task("grounding", coord="norm1000")
    with pytest.raises(ValueError, match=r"task 'clevr_count' has no option\(s\) \['coords'\]"):
        get_task("clevr_count", coords="norm1000")


@pytest.mark.parametrize("name", sorted(TASKS.names()))
def test_config_options_and_guards_reach_every_task(name: str) -> None:
    config = load_config(None, [f"task.name={name}", "task.options={think_instruction: Think hard.}",
                                "task.guards={max_tokens: 50, prompt_copy: false}"])
    task = build_task(name, config.task, ModelInfo())
    assert task.think_instruction == "Think hard."
    assert task.guards.max_tokens == 50 and not task.guards.prompt_copy
    options = task.reward_options()
    guarded = set(task.guarded_rewards) & set(task.default_rewards)
    assert {name for name, values in options.items() if "guards" in values} == guarded
    assert all(options[name]["guards"] is task.guards for name in guarded)


def test_options_may_not_set_the_model_or_the_guards() -> None:
    config = load_config(None, ["task.options={guards: {max_tokens: 5}}"])
    with pytest.raises(ValueError, match="task.options cannot set \\['guards'\\]"):
        build_task("clevr_count", config.task, ModelInfo())


def test_math_timeout_is_a_task_option() -> None:
    task = get_task("math", timeout_seconds=0.5)
    assert task.reward_options()["math_accuracy"]["timeout_seconds"] == 0.5
    with pytest.raises(ValueError, match="timeout_seconds must be positive"):
        get_task("geometry", timeout_seconds=0)
    assert REWARDS.get("math_accuracy")(["<answer>1/2</answer>"], answer=["0.5"], timeout_seconds=0.5) == [1.0]


def test_a_lora_checkpoint_tells_its_family_through_its_base_model(tmp_path: Path, tiny_qwen25vl: Path) -> None:
    checkpoint = tmp_path / "lora-step-3"
    load_processor(str(tiny_qwen25vl)).save_pretrained(checkpoint)
    (checkpoint / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tiny_qwen25vl)}))
    config = load_config(None, [])
    assert task_model_info(config.model, str(checkpoint)) == task_model_info(config.model, str(tiny_qwen25vl))
    assert task_model_info(config.model, str(checkpoint)).family == "qwen2_5_vl"
