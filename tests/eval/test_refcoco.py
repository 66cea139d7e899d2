"""RefCOCO/+/g from the Hub parquet: one question per referring expression, the first box in the model
family's coordinates, IoU >= 0.5 against the annotated box."""

from __future__ import annotations

from pathlib import Path

import pytest

import eval as evaluation
from eval import EvalOptions
from eval.benchmarks import BENCHMARKS
from eval.benchmarks.refcoco import RefCOCO
from mmgrpo.config import BenchmarkConfig
from processors.budgets import ImageBudget
from processors.image import budget_size
from tasks.base import ModelInfo
from tests.eval import published, saved_predictions
from tests.eval.scoring import tables
from tests.eval.scoring.tables import Case

ORIGINAL = (1000, 500)
# Resizes the 1000x500 image to the 500x250 one the tables' Qwen2.5-VL boxes are written in.
HALF = ImageBudget(max_pixels=500 * 250, factor=50)


def row(question_id: str, expressions: list[str], bbox: list[float], seed: int) -> dict:
    """One annotation with the Hub's columns."""
    return {"question_id": question_id, "image": seed,
            "question": "Please carefully observe the area circled in the image and come up with a caption.",
            "answer": expressions, "segmentation": [float(v) for v in bbox[:2]], "bbox": bbox, "iscrowd": 0,
            "file_name": f"COCO_train2014_{seed:012d}.jpg"}


ROWS = [row("101", ["the dog on the left", "left dog"], [100.0, 100.0, 200.0, 200.0], 1),
        row("102", ["red car"], [500.0, 200.0, 300.0, 100.0], 2)]


@pytest.fixture(scope="module")
def refcoco_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("RefCOCO")
    published.write_parquet(folder / "data" / "val-00000-of-00001.parquet", ROWS, image_size=ORIGINAL)
    published.write_parquet(folder / "data" / "testA-00000-of-00001.parquet", ROWS[1:], image_size=ORIGINAL)
    return folder


@pytest.fixture(scope="module")
def items(refcoco_folder):
    return BENCHMARKS.get("refcoco_val").read(str(refcoco_folder), "val")[0]


def test_each_expression_is_a_question_with_the_annotated_box_in_corner_form(refcoco_folder, items):
    assert [(item.id, item.question, item.answer) for item in items] == [
        ("101", "the dog on the left", [100.0, 100.0, 300.0, 300.0]),
        ("101#2", "left dog", [100.0, 100.0, 300.0, 300.0]),
        ("102", "red car", [500.0, 200.0, 800.0, 300.0])]
    assert items[0].fields["image_size"] == ORIGINAL
    assert BENCHMARKS.get("refcoco_val").official_prompt(items[1]) == (
        "Please provide the bounding box coordinate of the region this sentence describes: left dog.")
    testa, _ = BENCHMARKS.get("refcoco+_testA").read(str(refcoco_folder), "testA")
    assert [item.id for item in testa] == ["102"]  # testA-* files only, not val or test


def test_a_row_without_expressions_or_with_an_empty_box_is_skipped(tmp_path):
    broken = [row("1", [], [1.0, 1.0, 5.0, 5.0], 1), row("2", ["cup"], [1.0, 1.0, 0.0, 5.0], 2), ROWS[1]]
    published.write_parquet(tmp_path / "data" / "val-0.parquet", broken)
    items, skipped = BENCHMARKS.get("refcocog_val").read(str(tmp_path), "val")
    assert [item.id for item in items] == ["102"]
    assert [(row.row_id, row.reason) for row in skipped] == [("1", "missing field"), ("2", "bad field")]


@pytest.mark.parametrize("case", tables.REFCOCO_QWEN2_5, ids=[case.why for case in tables.REFCOCO_QWEN2_5])
def test_qwen2_5_vl_boxes_are_pixels_of_the_resized_image(items, case: Case):
    assert budget_size(ORIGINAL, HALF) == (500, 250)
    benchmark = BENCHMARKS.get("refcoco_val").for_model(ModelInfo("qwen2_5_vl", HALF))
    assert tuple(items[0].answer) == case.gold
    assert benchmark.judge(case.completion, items[0]).correct is case.verdict


@pytest.mark.parametrize("case", tables.REFCOCO_QWEN2, ids=[case.why for case in tables.REFCOCO_QWEN2])
def test_qwen2_vl_boxes_are_on_the_1000_grid(items, case: Case):
    benchmark = BENCHMARKS.get("refcoco_val").for_model(ModelInfo("qwen2_vl", HALF))
    assert benchmark.judge(case.completion, items[0]).correct is case.verdict


def test_the_answer_tags_of_the_task_style_are_read_first(items):
    benchmark = BENCHMARKS.get("refcoco_val").for_model(ModelInfo("qwen2_5_vl", HALF))
    verdict = benchmark.judge("<think>[0, 0, 5, 5] is the sky</think><answer>[50, 50, 150, 150]</answer>", items[0],
                              "task")
    assert verdict.correct and verdict.prediction == [100.0, 100.0, 300.0, 300.0]


def test_a_family_without_a_box_convention_is_refused():
    with pytest.raises(ValueError, match="no box convention for model family 'llava'"):
        BENCHMARKS.get("refcoco_val").for_model(ModelInfo("llava"))


def test_saved_completions_are_read_as_qwen2_5_vl_at_the_default_budget(refcoco_folder, tmp_path):
    # 1000x500 at the default budget is shown at 1008x504: a box of the original's pixels is 0.8% off, still a hit.
    entry, rows = saved_predictions.score(tmp_path, "refcoco_val", refcoco_folder, {
        "101": '[{"bbox_2d": [101, 101, 302, 302], "label": "dog"}]', "101#2": "the left one", "102": "[0, 0, 10, 10]"})
    assert [(row["prompt_id"], row["metric"], row.get("note", "")) for row in rows] == [
        ("101", 1.0, ""), ("101#2", 0.0, "unread"), ("102", 0.0, "")]
    assert entry["summary"]["refcoco_val/accuracy"] == pytest.approx(1 / 3)


def test_a_model_run_scores_boxes_in_the_models_own_image_size(refcoco_folder, tiny_qwen25vl, tmp_path, monkeypatch):
    """The image reaches the model, and its boxes are read in that model's family and image budget."""
    seen: list[ModelInfo] = []
    for_model = RefCOCO.for_model
    monkeypatch.setattr(RefCOCO, "for_model", lambda self, model: seen.append(model) or for_model(self, model))
    results = evaluation.run([str(tiny_qwen25vl)], [], tmp_path, options=EvalOptions(batch_size=4, progress=False),
                             benchmarks=[BenchmarkConfig("refcoco_val", str(refcoco_folder), limit=2)],
                             benchmark_max_new_tokens=4)
    (result,) = results.values()
    assert result.summary()["refcoco_val/n"] == 2
    assert [item.sample_id for item in result.items] == ["101", "101#2"]
    assert [model.family for model in seen] == ["qwen2_5_vl"] and seen[0].image_budget.factor == 28


QWEN2_BOXES = {"101": "<|box_start|>(100,200),(300,600)<|box_end|>", "102": "(500,400),(800,600)"}  # 0-1000 grid


@pytest.mark.parametrize(("flags", "hits"), [
    ((), [0.0, 0.0]),  # read as Qwen2.5-VL pixels (the default)
    (("--predictions-model", "tiny:qwen2_5_vl"), [0.0, 0.0]),
    (("--predictions-model", "tiny:qwen2_vl"), [1.0, 1.0]),
])
def test_saved_qwen2_vl_boxes_score_right_only_when_named_as_qwen2_vl(refcoco_folder, tmp_path, monkeypatch, flags,
                                                                      hits):
    """The model behind saved predictions is read from its config and processor; its weights never load."""
    monkeypatch.setattr(evaluation.benchmark, "load_model_and_processor", lambda *args, **kwargs: pytest.fail("loaded"))
    _, rows = saved_predictions.score(tmp_path, "refcoco_val", refcoco_folder, QWEN2_BOXES, *flags)
    assert [(row["prompt_id"], row["metric"]) for row in rows] == [("101", hits[0]), ("102", hits[1])]


def test_saved_boxes_are_read_at_the_named_models_image_budget(refcoco_folder, tmp_path):
    """A Qwen2.5-VL shown the 1000x500 image at 140x56 (model.max_pixels) answers in that image's pixels."""
    boxes = {"101": "[14, 11, 42, 34]"}  # [100, 100, 300, 300] of the original at 140x56
    (tmp_path / "default").mkdir(), (tmp_path / "named").mkdir()
    _, default = saved_predictions.score(tmp_path / "default", "refcoco_val", refcoco_folder, boxes)
    _, named = saved_predictions.score(tmp_path / "named", "refcoco_val", refcoco_folder, boxes,
                                       "--predictions-model", "tiny:qwen2_5_vl", f"model.max_pixels={28 * 28 * 16}")
    assert [row["metric"] for row in default] == [0.0] and [row["metric"] for row in named] == [1.0]
    assert named[0]["parsed_answer"] == pytest.approx([100.0, 98.21, 300.0, 303.57], abs=0.01)


def test_a_predictions_model_without_predictions_is_refused(refcoco_folder, tmp_path, capsys):
    from mmgrpo.cli import main

    assert main(["eval", "--predictions-model", "tiny:qwen2_vl", "--benchmark", f"refcoco_val={refcoco_folder}",
                 "--out", str(tmp_path)]) == 2
    assert "eval.predictions_model names the model of saved predictions: it needs eval.predictions" in \
        capsys.readouterr().err
