"""DocVQA from its Hub files: ANLS as partial credit, per question type."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.benchmarks import BENCHMARKS
from tests.eval import published, saved_predictions


def row(question_id: str, question: str, answers: list[str], types: list[str], seed: int) -> dict:
    """One row with the Hub's columns."""
    return {"questionId": question_id, "question": question, "question_types": types, "image": seed,
            "docId": seed, "ucsf_document_id": f"doc{seed}", "ucsf_document_page_no": "1", "answers": answers,
            "data_split": "val"}


ROWS = [
    row("1001", "Who signed the letter?", ["Smith", "J. Smith"], ["handwritten", "form"], 1),
    row("1002", "What is the ratio?", ["0.28"], ["table/list"], 2),
    row("1003", "What is the total?", ["42"], ["handwritten"], 3),
]


@pytest.fixture(scope="module")
def docvqa_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("DocVQA") / "DocVQA"
    published.write_parquet(folder / "validation-00000-of-00001.parquet", ROWS)
    return folder


def test_items_keep_their_answers_and_question_types(docvqa_folder):
    benchmark = BENCHMARKS.get("docvqa_val")
    items, skipped = benchmark.read(str(docvqa_folder), "validation")
    assert not skipped and [item.id for item in items] == ["1001", "1002", "1003"]
    assert items[0].answer == ["Smith", "J. Smith"] and items[0].categories["question_types"] == ("handwritten", "form")
    assert benchmark.official_prompt(items[1]) == (
        "What is the ratio?\nAnswer the question using a single word or phrase.")


def test_saved_completions_get_anls_as_partial_credit_per_question_type(docvqa_folder, tmp_path):
    entry, rows = saved_predictions.score(tmp_path, "docvqa_val", docvqa_folder, {
        "1001": "smith",  # equal ignoring case
        "1002": "0.29",  # one edit in four characters: 0.75
        "1003": "The total is 42",  # too far from "42": 0
    })
    assert [row["metric"] for row in rows] == [1.0, pytest.approx(0.75), 0.0]
    assert entry["summary"]["docvqa_val/accuracy"] == pytest.approx(1.75 / 3)
    types = entry["categories"]["docvqa_val"]["question_types"]
    assert {label: cell["accuracy"] for label, cell in types.items()} == {
        "handwritten": 0.5, "form": 1.0, "table/list": pytest.approx(0.75)}
