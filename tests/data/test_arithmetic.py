"""The ``arithmetic`` recipe: seeded text-only word problems whose answers are checked from the text alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from data_recipes.loading import load_rows
from data_recipes.make import make_dataset
from tasks import get_task

N = 60
OPENING = re.compile(r"^(\w+) has (\d+) (\w+)\.")
STEP = re.compile(r" (\w+) (gets|gives away) (\d+)(?: more)?\.")
QUESTION = re.compile(r" How many (\w+) does (\w+) have\?$")


def rows(directory: Path) -> list[dict]:
    lines = [line for split in ("train", "test") for line in (directory / f"{split}.jsonl").read_text().splitlines()]
    return [json.loads(line) for line in lines]


def answer_from_text(problem: str) -> tuple[int, list[int], int]:
    """(answer, every running total, number of operations), read from the problem text only."""
    opening, question = OPENING.match(problem), QUESTION.search(problem)
    assert opening and question, problem
    name, start, item = opening.groups()
    assert question.groups() == (item, name)
    middle = problem[opening.end() : question.start()]
    steps = STEP.findall(middle)
    assert "".join(f" {who} {verb} {n}{' more' if verb == 'gets' else ''}." for who, verb, n in steps) == middle
    totals = [int(start)]
    for who, verb, amount in steps:
        assert who == name
        totals.append(totals[-1] + int(amount) if verb == "gets" else totals[-1] - int(amount))
    return totals[-1], totals, len(steps)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("arithmetic")
    make_dataset("arithmetic", N, out, seed=3)
    return out


def test_answers_match_the_text_and_the_stored_operands(made):
    all_rows = rows(made)
    for row in all_rows:
        answer, totals, n_steps = answer_from_text(row["problem"])
        assert row["answer"] == answer
        assert all(0 <= total <= 20 for total in totals)  # the default max_answer
        assert 1 <= n_steps <= 3 and len(row["steps"]) == n_steps
        recomputed = row["start"] + sum(s["amount"] * (1 if s["operation"] == "add" else -1) for s in row["steps"])
        assert recomputed == answer
    assert len({row["answer"] for row in all_rows}) >= 8  # answers really vary
    assert {len(row["steps"]) for row in all_rows} == {1, 2, 3}
    assert {s["operation"] for row in all_rows for s in row["steps"]} == {"add", "subtract"}


def test_same_seed_gives_identical_files_and_text_only_rows(made, tmp_path):
    make_dataset("arithmetic", N, tmp_path / "again", seed=3)
    make_dataset("arithmetic", N, tmp_path / "other", seed=4)
    for name in ("train.jsonl", "test.jsonl"):
        assert (made / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    assert (made / "train.jsonl").read_bytes() != (tmp_path / "other" / "train.jsonl").read_bytes()
    assert not any((made / "media").iterdir())
    assert not {"image", "video", "audio"} & set(rows(made)[0])


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_curriculum_steps_and_a_small_answer_range(tmp_path, steps):
    make_dataset("arithmetic", 40, tmp_path, seed=0, min_steps=steps, max_steps=steps, max_answer=9, max_amount=3)
    for row in rows(tmp_path):
        answer, totals, n_steps = answer_from_text(row["problem"])
        assert n_steps == steps and row["answer"] == answer and all(0 <= t <= 9 for t in totals)
        assert all(1 <= s["amount"] <= 3 for s in row["steps"])


def test_one_operation_only_and_impossible_options_are_clear_errors(tmp_path):
    make_dataset("arithmetic", 20, tmp_path, seed=0, operations=("subtract",), max_steps=2)
    assert all(s["operation"] == "subtract" for row in rows(tmp_path) for s in row["steps"])
    with pytest.raises(ValueError, match="no start in 0..3 allows 3 steps"):
        make_dataset("arithmetic", 4, tmp_path, max_start=3, operations=("subtract",), min_amount=2)
    with pytest.raises(ValueError, match="operations must be a non-empty subset"):
        make_dataset("arithmetic", 4, tmp_path, operations=("multiply",))
    with pytest.raises(ValueError, match="min_steps <= max_steps"):
        make_dataset("arithmetic", 4, tmp_path, min_steps=3, max_steps=2)


def test_rows_load_as_text_only_math_samples(made):
    loaded = load_rows(made, split="test")
    assert loaded.adapter == "canonical" and not loaded.skipped and loaded.info["task"] == "math"
    task = get_task(loaded.info["task"])
    row = loaded.rows[0]
    sample = task.to_sample(row, think=False)
    [user] = sample.messages
    assert [part["type"] for part in user["content"]] == ["text"] and row["problem"] in user["content"][0]["text"]
    assert task.metric(f"<answer>{row['answer']}</answer>", sample) == 1.0
    assert task.metric(f"<answer>{row['answer'] + 1}</answer>", sample) == 0.0
