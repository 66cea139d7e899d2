"""MME from its Hub files: two questions per image under one id, MME's reading, acc, acc+ and totals."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.benchmarks import BENCHMARKS
from tests.eval import published, saved_predictions


def row(image: str, question: str, answer: str, seed: int) -> dict:
    """One row with the Hub's columns (``question_id`` names the image)."""
    return {"question_id": image, "image": seed, "question": f"{question} Please answer yes or no.",
            "answer": answer, "category": image.split("/")[0]}


CAR, CODE, COUNT = "existence/000000006040.jpg", "code_reasoning/0020.png", "count/000000000001.jpg"
ROWS = [
    row(CAR, "Is there a car in this image?", "Yes", 1), row(CAR, "Is there a bear in this image?", "No", 1),
    row(CODE, "Does the code print 3?", "Yes", 2), row(CODE, "Does the code print 4?", "No", 2),
    row(COUNT, "Are there two dogs?", "Yes", 3),  # its pair is missing (as under --limit)
]


@pytest.fixture(scope="module")
def mme_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("MME")
    published.write_parquet(folder / "data" / "test-00000-of-00001.parquet", ROWS)
    return folder


def test_both_questions_of_an_image_get_their_own_id_and_the_published_prompt(mme_folder):
    benchmark = BENCHMARKS.get("mme")
    items, skipped = benchmark.read(str(mme_folder), "test")
    assert not skipped and [item.id for item in items] == [CAR, f"{CAR}#2", CODE, f"{CODE}#2", COUNT]
    assert {item.fields["image"] for item in items[:2]} == {CAR} and items[1].answer == "no"
    assert benchmark.official_prompt(items[0]) == "Is there a car in this image? Please answer yes or no."


def test_a_subtask_mme_does_not_have_is_skipped(tmp_path):
    folder = tmp_path / "MME"
    published.write_parquet(folder / "data" / "test-00000-of-00001.parquet", [{**ROWS[0], "category": "dance"}, ROWS[1]])
    items, skipped = BENCHMARKS.get("mme").read(str(folder), "test")
    assert [item.id for item in items] == [f"{CAR}#2"] and "dance" in skipped[0].detail


def test_saved_completions_get_mmes_acc_acc_plus_and_totals(mme_folder, tmp_path):
    entry, rows = saved_predictions.score(tmp_path, "mme", mme_folder, {
        CAR: "Yes", f"{CAR}#2": "No, there is not.",  # both right: acc 100, acc+ 100
        CODE: "yes", f"{CODE}#2": "Yes",  # one right: acc 50, acc+ 0
        COUNT: "Yes",  # right, but its image lacks its second question: not in MME's numbers
    })
    assert [row["metric"] for row in rows] == [1.0, 1.0, 1.0, 0.0, 1.0]
    summary = entry["summary"]
    assert summary["mme/accuracy"] == pytest.approx(0.8)
    assert (summary["mme/existence/acc"], summary["mme/existence/acc_plus"], summary["mme/existence/score"]) == \
        (100.0, 100.0, 200.0)
    assert (summary["mme/code_reasoning/acc"], summary["mme/code_reasoning/acc_plus"]) == (50.0, 0.0)
    assert (summary["mme/perception"], summary["mme/cognition"], summary["mme/incomplete_images"]) == (200.0, 50.0, 1.0)
    assert "mme/count/acc" not in summary
