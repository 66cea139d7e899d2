"""TextVQA from its Hub files: lmms-eval's capitalised question, VQA accuracy over ten answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.benchmarks import BENCHMARKS
from tests.eval import published, saved_predictions


def row(question_id: str, question: str, answers: list[str], seed: int) -> dict:
    """One row with the Hub's columns."""
    return {"image_id": f"img{seed}", "question_id": question_id, "question": question,
            "question_tokens": question.split(), "image": seed, "image_width": 56, "image_height": 56,
            "answers": answers, "image_classes": ["Sign"], "set_name": "val", "ocr_tokens": ["dakota"]}


ROWS = [
    row("34602", "what does the sign say about NYC?", ["dakota"] * 10, 1),
    row("34603", "is the light on?", ["yes"] * 2 + ["no"] * 8, 2),
    row("34604", "how many stars are shown?", ["2"] * 3 + ["two"] * 7, 3),
    row("34605", "what brand is this camera?", ["nikon"] * 10, 4),
]


@pytest.fixture(scope="module")
def textvqa_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("textvqa")
    published.write_parquet(folder / "data" / "validation-00000-of-00001.parquet", ROWS)
    return folder


def test_the_prompt_capitalises_the_question_as_lmms_eval_does(textvqa_folder):
    benchmark = BENCHMARKS.get("textvqa_val")
    items, skipped = benchmark.read(str(textvqa_folder), "validation")
    assert not skipped and len(items[0].answer) == 10
    assert benchmark.official_prompt(items[0]) == (
        "What does the sign say about nyc?\nAnswer the question using a single word or phrase.")


def test_saved_completions_get_vqa_accuracy(textvqa_folder, tmp_path):
    entry, rows = saved_predictions.score(tmp_path, "textvqa_val", textvqa_folder, {
        "34602": "Dakota.",  # normalised: case and the final period go
        "34603": "yes",  # two humans of ten agree: 0.6
        "34604": "two",  # number words become digits: all ten agree
        "34605": "I cannot tell",
    })
    assert [row["metric"] for row in rows] == [1.0, pytest.approx(0.6), 1.0, 0.0]
    assert entry["summary"]["textvqa_val/accuracy"] == pytest.approx(0.65)
