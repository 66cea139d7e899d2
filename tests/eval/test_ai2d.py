"""AI2D from its Hub files: lettered options, the answer index as a letter, VLMEvalKit's reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.benchmarks import BENCHMARKS
from tests.eval import published, saved_predictions

ROWS = [
    {"question": "Which stage follows the egg?", "options": ["egg", "larva", "pupa", "adult"], "answer": "1",
     "image": 1},
    {"question": "What does the arrow point to?", "options": ["sun", "moon", "earth"], "answer": "2", "image": 2},
    {"question": "Which organism is a producer?", "options": ["grass", "hawk", "snake", "frog"], "answer": "0",
     "image": 3},
    {"question": "What is label D?", "options": ["stem", "root", "leaf", "flower"], "answer": "3", "image": 4},
]


@pytest.fixture(scope="module")
def ai2d_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ai2d")
    published.write_parquet(folder / "data" / "test-00000-of-00001.parquet", ROWS)
    return folder


def test_items_letter_the_options_and_the_answer(ai2d_folder):
    benchmark = BENCHMARKS.get("ai2d")
    items, skipped = benchmark.read(str(ai2d_folder), "test")
    assert not skipped and [item.id for item in items] == ["0", "1", "2", "3"]  # no id column: row numbers
    assert [item.answer for item in items] == ["B", "C", "A", "D"]
    assert benchmark.official_prompt(items[1]) == (
        "What does the arrow point to?\nA. sun\nB. moon\nC. earth\n"
        "Answer with the option's letter from the given choices directly.")


def test_an_answer_index_past_the_options_is_skipped(tmp_path):
    folder = tmp_path / "ai2d"
    published.write_parquet(folder / "data" / "test-00000-of-00001.parquet", [{**ROWS[1], "answer": "3"}, ROWS[0]])
    items, skipped = BENCHMARKS.get("ai2d").read(str(folder), "test")
    assert [item.id for item in items] == ["1"] and (skipped[0].row_id, skipped[0].reason) == ("0", "bad field")


def test_saved_completions_are_scored_by_vlmevalkit_rules(ai2d_folder, tmp_path):
    entry, rows = saved_predictions.score(tmp_path, "ai2d", ai2d_folder, {
        "0": "B",
        "1": "The answer is C",
        "2": "grass",  # the one option whose text it is
        "3": "I'm not sure",  # nothing to read
    })
    assert [(row["parsed_answer"], row["metric"]) for row in rows] == [("B", 1.0), ("C", 1.0), ("A", 1.0), (None, 0.0)]
    assert entry["summary"]["ai2d/accuracy"] == pytest.approx(0.75)
    assert entry["summary"]["ai2d/notes/unread"] == pytest.approx(0.25)
