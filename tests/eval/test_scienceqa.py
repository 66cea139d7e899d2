"""ScienceQA-IMG from its Hub files: the hint as context, LLaVA's reading, per subject and grade band."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.benchmarks import BENCHMARKS
from tests.eval import published, saved_predictions


def row(question: str, choices: list[str], answer: int, hint: str, subject: str, grade: str, seed: int) -> dict:
    """One row with the Hub's columns."""
    return {"image": seed, "question": question, "choices": choices, "answer": answer, "hint": hint,
            "task": "closed choice", "grade": grade, "subject": subject, "topic": "fixture",
            "category": "fixture", "skill": "fixture", "lecture": "", "solution": ""}


ROWS = [
    row("Which pole is marked?", ["north", "south"], 0, "The figure shows a magnet.", "natural science", "grade2", 1),
    row("Which is colder?", ["warm", "cold", "hot"], 1, "", "natural science", "grade8", 2),
    row("Which animal has fur?", ["fox", "trout"], 0, "", "natural science", "grade3", 3),
    row("Which word is a noun?", ["run", "dog", "blue"], 1, "", "language science", "grade10", 4),
]


@pytest.fixture(scope="module")
def scienceqa_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ScienceQA") / "ScienceQA-IMG"
    published.write_parquet(folder / "test-00000-of-00001.parquet", ROWS)
    return folder


def test_the_hint_is_the_context_line_of_the_prompt(scienceqa_folder):
    benchmark = BENCHMARKS.get("scienceqa_img")
    items, skipped = benchmark.read(str(scienceqa_folder), "test")
    assert not skipped and [item.answer for item in items] == ["A", "B", "A", "B"]
    assert benchmark.official_prompt(items[0]) == (
        "Context: The figure shows a magnet.\nWhich pole is marked?\nA. north\nB. south\n"
        "Answer with the option's letter from the given choices directly.")
    assert benchmark.official_prompt(items[1]).startswith("Which is colder?\nA. warm")
    assert dict(items[3].categories) == {"subject": "language science", "grade": "G7-12"}


def test_saved_completions_are_scored_by_llavas_rules_per_subject_and_grade(scienceqa_folder, tmp_path):
    entry, rows = saved_predictions.score(tmp_path, "scienceqa_img", scienceqa_folder, {
        "0": "A",
        "1": "B. cold",  # a letter, a period and a space
        "2": "The answer is B.",  # read as B: wrong
        "3": "B.",  # a letter and a period alone is not read
    })
    assert [(row["parsed_answer"], row["metric"]) for row in rows] == [("A", 1.0), ("B", 1.0), ("B", 0.0), (None, 0.0)]
    categories = entry["categories"]["scienceqa_img"]
    assert {label: cell["accuracy"] for label, cell in categories["subject"].items()} == {
        "natural science": pytest.approx(2 / 3), "language science": 0.0}
    assert {label: cell["n"] for label, cell in categories["grade"].items()} == {"G1-6": 2, "G7-12": 2}
