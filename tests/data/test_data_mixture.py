"""Mixture recipes: weights respected, seeded, every row once per pass, tasks resolved."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml

from data_recipes.mixture import load_mixture, read_recipe


@pytest.fixture
def two_datasets(tmp_path, images, write_jsonl):
    """A: 4 counting rows (r1v format), B: 2 canonical rows plus one with a missing image."""
    a = write_jsonl(
        tmp_path / "a" / "train.jsonl",
        [{"image_path": str(images["good"]), "question": f"q{i}", "ground_truth": i} for i in range(4)],
    )
    b = write_jsonl(
        tmp_path / "b" / "train.jsonl",
        [
            {"id": "b0", "problem": "p0", "answer": "A", "image": str(images["good"])},
            {"id": "b1", "problem": "p1", "answer": "B", "image": str(images["other"])},
            {"id": "b2", "problem": "p2", "answer": "C", "image": "missing.png"},
        ],
    )
    return a.parent, b.parent


def recipe(a, b, weight_a=3.0):
    return {
        "seed": 5,
        "datasets": [
            {"path": str(a), "task": "clevr_count", "weight": weight_a},
            {"path": str(b), "adapter": "canonical", "task": "geometry"},
        ],
    }


def test_weights_are_respected_and_the_stream_is_seeded(two_datasets):
    mixture = load_mixture(recipe(*two_datasets))
    draws = mixture.sample(2000)
    share = Counter(task for task, _ in draws)["clevr_count"] / len(draws)
    assert abs(share - 0.75) < 0.04
    assert draws == mixture.sample(2000, seed=5)  # the recipe's seed is the default
    assert draws != mixture.sample(2000, seed=6)
    assert [s.row_id for s in mixture.skipped] == ["b2"]


def test_each_row_is_seen_once_per_pass(two_datasets):
    mixture = load_mixture(recipe(*two_datasets, weight_a=1.0))
    a_rows = [row["problem"] for task, row in mixture.sample(400, seed=1) if task == "clevr_count"]
    for start in range(0, len(a_rows) - 4, 4):
        assert sorted(a_rows[start : start + 4]) == ["q0", "q1", "q2", "q3"]


def test_yaml_recipe_and_task_from_dataset_info(tmp_path, two_datasets):
    from data_recipes.make import make_dataset

    make_dataset("clevr_count", 5, tmp_path / "gen", seed=0)
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump({"datasets": [{"path": str(tmp_path / "gen"), "split": "test"}]}))
    mixture = load_mixture(path)
    assert mixture.tasks == ["clevr_count"] and len(mixture.parts[0].rows) == 1

    with pytest.raises(ValueError, match="needs a 'task'"):
        load_mixture({"datasets": [{"path": str(two_datasets[0])}]})


def test_bad_recipes_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="no 'datasets' list"):
        read_recipe({"seed": 1})
    with pytest.raises(ValueError, match="unknown keys \\['wieght'\\]"):
        read_recipe({"datasets": [{"path": "x", "wieght": 2}]})
    with pytest.raises(ValueError, match="weight must be > 0"):
        read_recipe({"datasets": [{"path": "x", "weight": 0}]})
