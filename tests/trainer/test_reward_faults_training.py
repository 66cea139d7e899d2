"""Faulty rewards in GRPO steps: skipped, counted per reward and named in the run folder; or stop the run."""

from __future__ import annotations

import json
import math
import threading

import pytest
import torch

from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.rollouts import Group, Rollouts
from mmgrpo.trainer.step_metrics import rollout_metrics
from mmgrpo.types import Completion, Sample
from tasks import register_reward

from tests.training import build_trainer_inputs

RELEASE = threading.Event()


@register_reward("test_train_nan")
def always_nan(completions: list[str], **_) -> list[float]:
    if len(completions) > 1:
        raise RuntimeError("refuses batches")  # every completion is then retried alone
    return [float("nan")]


@register_reward("test_train_hangs")
def hangs(completions: list[str], **_) -> list[float]:
    RELEASE.wait(timeout=5.0)
    return [1.0] * len(completions)


def group(components: dict[str, list[float | None]], rewards: list[float]) -> Group:
    sample = Sample(id="s", task="clevr_count", messages=[], answer=3)
    completions = [Completion(text="x", token_ids=[1, 2]) for _ in rewards]
    return Group(sample, completions, rewards, components)


def test_a_reward_that_applied_to_nothing_has_no_mean_not_zero() -> None:
    rollouts = Rollouts(groups=[group({"share": [0.5, 1.0], "judge": [None, None]}, [0.5, 1.0])])
    metrics = rollout_metrics(rollouts)
    assert "reward/judge" not in metrics and "reward/judge_std" not in metrics
    assert metrics["reward/share"] == 0.75 and metrics["reward/share_std"] == 0.25
    assert metrics["reward/judge/errors"] == 0.0


def test_step_metrics_never_crash_on_a_non_finite_total() -> None:
    metrics = rollout_metrics(Rollouts(groups=[group({"share": [1.0, 0.0]}, [math.nan, 1.0])]))
    assert math.isnan(metrics["reward/total"]) and metrics["reward/share"] == 0.5


def run(config, run_dir) -> GRPOTrainer:
    model, processor, train_set = build_trainer_inputs(config, run_dir)
    torch.manual_seed(config.seed)
    trainer = GRPOTrainer(config, run_dir, model, processor, train_set)
    trainer.train()
    return trainer


def test_failing_rewards_are_skipped_counted_and_named(small_config, tmp_path) -> None:
    config = small_config(
        "train.steps=2", "task.reward_timeout=0.3",
        "task.rewards={share_of_threes: 1.0, test_train_nan: 1.0, test_train_hangs: 1.0}",
    )
    try:
        run(config, tmp_path / "run")
    finally:
        RELEASE.set()
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    completions = config.rollout.prompts_per_step * config.rollout.num_generations
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["reward/test_train_nan/errors"] == row["reward/test_train_hangs/errors"] == completions
        assert row["reward/share_of_threes/errors"] == 0
        assert "reward/test_train_nan" not in row and math.isfinite(row["reward/total"]) and math.isfinite(row["loss"])
    errors = [json.loads(line) for line in (tmp_path / "run" / "reward_errors.jsonl").read_text().splitlines()]
    assert len(errors) == 2 * 2 * completions
    kinds = {(error["reward"], error["kind"]) for error in errors}
    assert kinds == {("test_train_nan", "non-finite"), ("test_train_hangs", "timeout")}
    assert all(error["sample_id"] and error["step"] in (1, 2) for error in errors)


def test_raise_policy_stops_the_run_naming_the_reward(small_config, tmp_path) -> None:
    config = small_config("train.steps=1", "task.reward_errors=raise",
                          "task.rewards={share_of_threes: 1.0, test_train_nan: 1.0}")
    with pytest.raises(RuntimeError, match=r"reward 'test_train_nan' on sample '.+' \(completion \d\): non-finite"):
        run(config, tmp_path / "run")


def test_a_resumed_run_drops_the_reward_errors_of_the_steps_it_redoes_and_the_summary_counts_them(tmp_path) -> None:
    from mmgrpo.trainer.metrics import MetricsLogger
    from mmgrpo.trainer.reward_errors import record_reward_errors, reward_error_summary
    from tasks.reward_calls import RewardError

    for step in (1, 2, 3):
        record_reward_errors(tmp_path, step, [RewardError("judge", f"s{step}", 0, "timeout", "no result")])
    MetricsLogger(tmp_path, tensorboard=False, resume_step=2).close()
    assert [row["step"] for row in read_metrics(tmp_path / "reward_errors.jsonl")] == [1, 2]
    assert reward_error_summary(tmp_path) == {"reward_errors": 2, "reward_errors_by_reward": {"judge": 2}}
