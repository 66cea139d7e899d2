"""``run_training`` honours the eval and logging switches: no test set without an eval, no bars when off."""

from __future__ import annotations

import json
from pathlib import Path

from mmgrpo.trainer.pipeline import run_training


def test_no_test_set_is_read_when_every_eval_is_off(small_config, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-test-set.jsonl"
    config = small_config(
        f"data.test=[{{path: {missing}}}]", "eval.before=false", "eval.after=false", "eval.every_n_steps=0",
        "train.steps=1",
    )
    summary = run_training(config)
    assert summary["grpo_steps"] == 1 and summary["n_eval"] == 0


def test_progress_bar_false_silences_the_eval_bars(small_config, capfd) -> None:
    config = small_config("eval.before=true", "eval.after=true", "eval.limit=4", "train.steps=1")
    summary = run_training(config)
    assert summary["n_eval"] == 4 and "accuracy_after_grpo" in summary
    err = capfd.readouterr().err
    assert "item/s" not in err  # the eval bar's unit (tqdm writes even off a terminal)
    assert "Loading weights" not in err  # transformers' own bar


def test_eval_limit_caps_each_held_out_dataset_so_every_task_is_evaluated(small_config) -> None:
    config = small_config(
        "data.test=[{recipe: clevr_count, recipe_args: {n: 40, test_fraction: 0.2}, split: test},"
        " {recipe: arithmetic, recipe_args: {n: 40, test_fraction: 0.2}, split: test, task: math}]",
        "eval.before=false", "eval.after=true", "eval.limit=3", "train.steps=1",
    )
    summary = run_training(config)
    assert summary["n_eval"] == 6
    evaluations = json.loads((Path(config.log.output_dir) / "test" / "evaluations.json").read_text())
    tasks = [item["task"] for item in evaluations["after GRPO"]["items"]]
    assert sorted(set(tasks)) == ["clevr_count", "math"] and tasks.count("math") == 3

