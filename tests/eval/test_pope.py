"""POPE from its Hub files: POPE's yes/no reading, and its precision, recall, F1 and yes-ratio per split."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import eval as evaluation
from eval import EvalOptions
from eval.benchmark import score_predictions
from eval.benchmarks import BENCHMARKS
from eval.results import EvalResult
from mmgrpo.config import BenchmarkConfig
from tests.eval import published, saved_predictions


def row(number: int, split: str, obj: str, answer: str) -> dict:
    """One row with the Hub's columns."""
    return {"id": str(number), "question_id": str(number), "question": f"Is there a {obj} in the image?",
            "answer": answer, "image_source": f"COCO_val2014_{number:012d}", "image": number, "category": split}


ROWS = [row(1, "random", "dog", "yes"), row(2, "random", "cat", "no"), row(3, "random", "cat", "yes"),
        row(4, "adversarial", "fork", "no"), row(5, "adversarial", "cup", "no"), row(6, "adversarial", "car", "yes")]


@pytest.fixture(scope="module")
def pope_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("POPE")
    published.write_parquet(folder / "data" / "test-00000-of-00001.parquet", ROWS)
    return folder


def test_the_prompt_asks_for_a_word_or_phrase(pope_folder):
    benchmark = BENCHMARKS.get("pope")
    items, skipped = benchmark.read(str(pope_folder), "test")
    assert not skipped and [item.id for item in items] == ["1", "2", "3", "4", "5", "6"]
    assert benchmark.official_prompt(items[0]) == (
        "Is there a dog in the image?\nAnswer the question using a single word or phrase.")


def test_saved_completions_get_popes_metrics_per_split(pope_folder, tmp_path):
    entry, rows = saved_predictions.score(tmp_path, "pope", pope_folder, {
        "1": "Yes, there is a dog.",
        "2": "No.",
        "3": "There is not a cat.",  # "not" in the first sentence: no
        "4": "yes",
        "5": "NO",  # only No, no and not read as no: "NO" is yes
        "6": "I think so",
    })
    assert [row["parsed_answer"] for row in rows] == ["yes", "no", "no", "yes", "yes", "yes"]
    summary = entry["summary"]
    assert summary["pope/accuracy"] == pytest.approx(0.5)
    assert {key.removeprefix("pope/random/"): value for key, value in summary.items()
            if key.startswith("pope/random/")} == pytest.approx(
        {"accuracy": 2 / 3, "precision": 1.0, "recall": 0.5, "f1": 2 / 3, "yes_ratio": 1 / 3})
    assert [summary[f"pope/adversarial/{name}"] for name in ("precision", "recall", "f1", "yes_ratio")] == \
        pytest.approx([1 / 3, 1.0, 0.5, 1.0])
    assert entry["categories"]["pope"]["category"]["adversarial"]["accuracy"] == pytest.approx(1 / 3)


def test_the_numbers_pope_reports_survive_a_saved_result(pope_folder, tmp_path):
    """What the trainer stores and reloads keeps the benchmark's own numbers."""
    predictions = tmp_path / "p.jsonl"
    predictions.write_text("\n".join(json.dumps({"id": row["question_id"], "completion": "No"}) for row in ROWS))
    (result,) = score_predictions(predictions, [BenchmarkConfig("pope", str(pope_folder))], tmp_path / "out").values()
    reloaded = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert reloaded.summary()["pope/random/recall"] == result.summary()["pope/random/recall"] == 0.0
    assert json.dumps(reloaded.reported) == json.dumps(result.reported)
    assert math.isnan(reloaded.summary()["pope/random/precision"])  # nothing answered yes: undefined, as published


def test_a_model_run_reports_popes_numbers_too(pope_folder, tiny_qwen25vl, tmp_path):
    """The images embedded in the parquet reach a model, and its run carries the per-split numbers."""
    results = evaluation.run([str(tiny_qwen25vl)], [], tmp_path, options=EvalOptions(batch_size=8, progress=False),
                             benchmarks=[BenchmarkConfig("pope", str(pope_folder))], benchmark_max_new_tokens=4)
    (result,) = results.values()
    summary = result.summary()
    assert summary["pope/n"] == len(ROWS)
    for split in ("random", "adversarial"):
        parsed = [item.completions[0].parsed_answer for item in result.items if item.categories["category"] == split]
        assert summary[f"pope/{split}/yes_ratio"] == pytest.approx(parsed.count("yes") / len(parsed))
