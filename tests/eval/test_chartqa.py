"""ChartQA from its Hub files: relaxed accuracy on the completion as it is, per human/augmented split."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.benchmarks import BENCHMARKS
from tests.eval import published, saved_predictions

ROWS = [
    {"type": "human_test", "question": "What is the peak value?", "answer": "45", "image": 1},
    {"type": "human_test", "question": "Which year is the highest?", "answer": "2019", "image": 2},
    {"type": "augmented_test", "question": "What color is the largest bar?", "answer": "Blue", "image": 3},
    {"type": "augmented_test", "question": "How many bars are there?", "answer": "7", "image": 4},
]


@pytest.fixture(scope="module")
def chartqa_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ChartQA")
    published.write_parquet(folder / "data" / "test-00000-of-00001.parquet", ROWS)
    return folder


def test_the_prompt_asks_for_a_single_word(chartqa_folder):
    benchmark = BENCHMARKS.get("chartqa")
    items, _ = benchmark.read(str(chartqa_folder), "test")
    assert benchmark.official_prompt(items[0]) == "What is the peak value?\nAnswer the question with a single word."
    assert [dict(item.categories) for item in items[1:3]] == [{"type": "human_test"}, {"type": "augmented_test"}]


def test_saved_completions_get_relaxed_accuracy_per_split(chartqa_folder, tmp_path):
    entry, rows = saved_predictions.score(tmp_path, "chartqa", chartqa_folder, {
        "0": "46",  # within 5% of 45
        "1": "2021",  # a year is a number too: within 5% of 2019
        "2": "blue",  # text: equal ignoring case
        "3": "7 bars",  # not a number, not the text
    })
    assert [row["metric"] for row in rows] == [1.0, 1.0, 1.0, 0.0]
    types = entry["categories"]["chartqa"]["type"]
    assert (types["human_test"]["accuracy"], types["augmented_test"]["accuracy"]) == (1.0, 0.5)
    assert entry["summary"]["chartqa/accuracy"] == pytest.approx(0.75)
