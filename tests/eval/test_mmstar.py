"""MMStar from its Hub file: options parsed from the question, VLMEvalKit's reading, per-category results."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.benchmarks import BENCHMARKS
from eval.benchmarks.mmstar import split_options
from tests.eval import published, saved_predictions


def row(index: int, question: str, options: str, answer: str, category: str, l2: str) -> dict:
    """One row with the Hub's columns (the options on the question's last line)."""
    return {"index": index, "question": f"{question}\nOptions: {options}", "image": index, "answer": answer,
            "category": category, "l2_category": l2,
            "meta_info": {"source": "fixture", "split": "val", "image_path": f"images/{index}.jpg"}}


ROWS = [
    row(1, "Which animal is shown?", "A: a cat, sitting, B: a dog, C: a bird, D: a fish", "B",
        "coarse perception", "image scene and topic"),
    row(2, "Which numbers are odd?", "A: 3, 5, and 7, B: 6, C: 8, D: 10", "A", "math", "numeric commonsense"),
    row(3, "How many apples?", "A: 4, B: 5, C: 7, D: 9", "D", "math", "numeric commonsense"),
    row(4, "Who is this?", "A: a chef, B: a pilot, C: a nurse, D: a judge", "C",
        "coarse perception", "image emotion"),
]


@pytest.fixture(scope="module")
def mmstar_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return published.write_parquet(tmp_path_factory.mktemp("MMStar") / "mmstar.parquet", ROWS)


def test_items_keep_the_published_question_and_read_its_options(mmstar_file):
    benchmark = BENCHMARKS.get("mmstar")
    items, skipped = benchmark.read(str(mmstar_file), "val")
    assert not skipped and [item.id for item in items] == ["1", "2", "3", "4"]
    assert items[1].fields["options"] == {"A": "3, 5, and 7", "B": "6", "C": "8", "D": "10"}
    assert dict(items[0].categories) == {"category": "coarse perception", "l2_category": "image scene and topic"}
    assert benchmark.official_prompt(items[0]) == (
        "Which animal is shown?\nOptions: A: a cat, sitting, B: a dog, C: a bird, D: a fish\n"
        "Answer with the option's letter from the given choices directly")
    assert items[0].media_refs == (f"{mmstar_file}#1/image",)


def test_a_question_without_its_options_line_is_skipped(tmp_path):
    broken = [{**ROWS[0], "question": "Which animal is shown?"}, *ROWS[1:]]
    items, skipped = BENCHMARKS.get("mmstar").read(str(published.write_parquet(tmp_path / "m.parquet", broken)), "val")
    assert [item.id for item in items] == ["2", "3", "4"] and skipped[0].reason == "bad field"


def test_options_split_only_at_the_next_letter():
    assert split_options("Q?\nOptions: A: x, B: y, z, C: B: w") == {"A": "x", "B": "y, z", "C": "B: w"}


def test_saved_completions_are_scored_by_vlmevalkit_rules_per_category(mmstar_file, tmp_path):
    entry, rows = saved_predictions.score(tmp_path, "mmstar", mmstar_file, {
        "1": "B",  # a lone letter
        "2": "The answer is A.",  # the letter among the last words
        "3": "9.",  # the one option whose text it contains (and not over twice as long as all options): D
        "4": "Sorry, I can't help with images of people yet.",  # a refusal: unread, wrong
    })
    assert [(row["prompt_id"], row["parsed_answer"], row["metric"]) for row in rows] == [
        ("1", "B", 1.0), ("2", "A", 1.0), ("3", "D", 1.0), ("4", None, 0.0)]
    assert entry["summary"]["mmstar/accuracy"] == pytest.approx(0.75)
    assert entry["summary"]["mmstar/notes/unread"] == pytest.approx(0.25)
    categories = entry["categories"]["mmstar"]
    assert {label: cell["accuracy"] for label, cell in categories["category"].items()} == {
        "coarse perception": 0.5, "math": 1.0}
    assert categories["l2_category"]["image emotion"]["n"] == 1


def test_an_option_named_in_a_long_answer_is_not_read():
    """VLMEvalKit reads option text only in an answer at most twice as long as all options together."""
    item = BENCHMARKS.get("mmstar").item(ROWS[2] | {"image": {"bytes": published.png(3)}}, "3", None, "m")
    assert BENCHMARKS.get("mmstar").judge("I think it is 9", item).prediction is None
