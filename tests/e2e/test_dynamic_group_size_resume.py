"""A run that sizes each prompt's group by its record (``algo.dynamic_group_size``), with ReMax's greedy baselines,
stops and resumes to exactly the uninterrupted run: the record of each prompt's successes and trials is in the
checkpoint, and every step meets step 1's prompts (4 training prompts, 4 a step), so the sizes after the resume
depend on it. The 2-rank run (``test_distributed_run.py``, ZeRO-2) checks that the ranks keep one record."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.pipeline import run_training
from tests.training import interrupt_step


def test_a_dynamic_group_size_run_stopped_after_step_one_resumes_exactly(small_config, rate_per_prompt_plugin,
                                                                          monkeypatch):
    options = ("train.steps=3", "checkpoint.every_n_steps=1", "algo.dynamic_group_size=true",
               "algo.advantage_estimator=remax", "rollout.num_generations=8", "algo.group_size_min=2",
               "algo.group_size_max=12", "data.train.0.recipe_args={n: 5, test_fraction: 0.2}",
               f"task.reward_plugins=[{rate_per_prompt_plugin}]", "task.rewards={one_in_answer: 1.0}",
               "eval.before=false", "eval.after=false")
    whole = small_config(*options, "log.run_name=whole")
    run_training(whole)
    restore = interrupt_step(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        run_training(small_config(*options, "log.run_name=cut"))
    restore()
    run_training(small_config(*options, "log.run_name=cut", "checkpoint.resume=latest"))

    runs = Path(whole.log.output_dir)
    expected, resumed = read_metrics(runs / "whole" / "metrics.jsonl"), read_metrics(runs / "cut" / "metrics.jsonl")
    assert [row["step"] for row in resumed] == [1, 2, 3]
    assert expected[1]["group_size/min"] < expected[1]["group_size/max"]  # step 2's sizes come from step 1's record
    for want, got in zip(expected, resumed, strict=True):
        for name in ("group_size/min", "group_size/max", "group_size/mean", "reward/total", "loss"):
            assert got[name] == pytest.approx(want[name], rel=1e-6, abs=1e-7), (want["step"], name)
    final = "checkpoints/step-3/model.safetensors"
    want_weights, got_weights = load_file(str(runs / "whole" / final)), load_file(str(runs / "cut" / final))
    assert all(torch.equal(want_weights[name], got_weights[name]) for name in want_weights)
