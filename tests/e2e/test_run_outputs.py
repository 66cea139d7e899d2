"""Checkpoints are atomic and pruned; metrics survive a resume; the report renders."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from mmgrpo.trainer.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_trainer_state,
    restore_rng_state,
    save_checkpoint,
    step_dirs,
)
from mmgrpo.trainer.metrics import MetricsLogger
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.report import write_report


class TinySaver(torch.nn.Module):
    """A module with the save_pretrained method the checkpoint code calls."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.fail = False

    def save_pretrained(self, folder) -> None:
        torch.save(self.state_dict(), folder / "weights.pt")
        if self.fail:
            raise RuntimeError("disk full")


def test_keep_last_prunes_oldest_and_latest_is_newest(tmp_path):
    model = TinySaver()
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, model, None, TrainerState(step=step), keep_last=2)
    assert [step for step, _ in step_dirs(tmp_path)] == [3, 4]
    assert latest_checkpoint(tmp_path).name == "step-4"


def test_failed_save_keeps_previous_checkpoint_intact(tmp_path):
    model = TinySaver()
    good = save_checkpoint(tmp_path, model, None, TrainerState(step=5, data={"position": 7}))
    model.fail = True
    with pytest.raises(RuntimeError):
        save_checkpoint(tmp_path, model, None, TrainerState(step=6), keep_last=1)
    assert latest_checkpoint(tmp_path) == good
    assert load_trainer_state(good).data == {"position": 7}
    assert not (tmp_path / "step-6").exists()


def test_rng_state_round_trips(tmp_path):
    save_checkpoint(tmp_path, TinySaver(), None, TrainerState(step=1))
    expected = (random.random(), torch.rand(3))
    restore_rng_state(load_trainer_state(tmp_path / "step-1").rng)
    assert random.random() == expected[0]
    assert torch.equal(torch.rand(3), expected[1])


def test_metrics_resume_drops_rows_after_resumed_step(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    for step in range(1, 6):
        logger.log(step, {"reward/total": step / 10})
    logger.close()
    resumed = MetricsLogger(tmp_path, tensorboard=False, resume_step=3)
    resumed.log(4, {"reward/total": 0.99})
    resumed.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert rows[-1]["reward/total"] == 0.99


def test_report_has_summary_and_plots(tmp_path):
    rows = [{"step": s, "reward/total": s * 0.1, "kl": 0.01 * s} for s in range(1, 5)]
    path = write_report(tmp_path, rows, {"accuracy_before_grpo": 0.25}, {"Eval": "| a | b |\n|---|---|"})
    text = path.read_text()
    assert "accuracy_before_grpo | 0.25" in text
    assert "plots/reward_total.png" in text and (tmp_path / "plots" / "kl.png").is_file()
    assert "plots/entropy.png" not in text  # absent metrics are not plotted
    json.dumps(rows)


def test_each_run_in_one_process_logs_only_to_its_own_train_log(small_config):
    """Two runs in one process (as a notebook or an in-process sweep does): the first run's
    train.log must not receive the second run's lines."""
    from mmgrpo.trainer.pipeline import run_training

    first, second = (small_config("train.steps=1", "eval.before=false", "eval.after=false", f"log.run_name={name}")
                     for name in ("first", "second"))
    run_training(first)
    first_log = (Path(first.log.output_dir) / "first" / "train.log").read_text()
    run_training(second)
    second_log = (Path(second.log.output_dir) / "second" / "train.log").read_text()
    assert second_log and (Path(first.log.output_dir) / "first" / "train.log").read_text() == first_log
