"""The GRPO trainer end to end on the tiny Qwen2.5-VL: it learns, resumes exactly, and its options run."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForImageTextToText

from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.trainer.checkpoint import latest_checkpoint
from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.trainer.metrics import read_metrics

from .conftest import build_trainer_inputs


def train(config, run_dir: Path, *, resume: bool = False) -> GRPOTrainer:
    checkpoint = latest_checkpoint(run_dir / "checkpoints") if resume else None
    model, processor, train_set = build_trainer_inputs(config, run_dir, checkpoint=checkpoint)
    torch.manual_seed(config.seed)
    trainer = GRPOTrainer(config, run_dir, model, processor, train_set, resume_from=checkpoint)
    trainer.train()
    return trainer


@pytest.mark.slow
def test_reward_rises_under_grpo(small_config, tmp_path):
    """Fails if the policy-gradient sign is flipped or advantages are zeroed (reward then falls or stays flat)."""
    config = small_config("train.steps=40", "rollout.prompts_per_step=4", "rollout.num_generations=8")
    train(config, tmp_path / "run")
    rewards = [row["reward/total"] for row in read_metrics(tmp_path / "run" / "metrics.jsonl")]
    first, last = statistics.mean(rewards[:5]), statistics.mean(rewards[-5:])
    assert last > first + 0.25, f"reward did not rise: first steps {first:.3f}, last steps {last:.3f}"


def test_ctrl_c_saves_and_resume_continues_exactly(small_config, tmp_path, monkeypatch):
    config = small_config("train.steps=4", "checkpoint.every_n_steps=0")
    full = train(config, tmp_path / "full")

    real_step = GRPOTrainer.step

    def interrupt_at_step_three(self):
        if self.step_index == 2:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(GRPOTrainer, "step", interrupt_at_step_three)
    stopped = train(config, tmp_path / "half")
    assert stopped.interrupted and latest_checkpoint(tmp_path / "half" / "checkpoints").name == "step-2"
    monkeypatch.setattr(GRPOTrainer, "step", real_step)
    resumed = train(config, tmp_path / "half", resume=True)

    full_rows = read_metrics(tmp_path / "full" / "metrics.jsonl")
    resumed_rows = read_metrics(tmp_path / "half" / "metrics.jsonl")
    assert [r["step"] for r in resumed_rows] == [1, 2, 3, 4]
    for a, b in zip(full_rows, resumed_rows):
        for key in ("reward/total", "loss", "grad_norm", "length/mean", "entropy"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), (a["step"], key)
    for (name, p), (_, q) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.allclose(p, q, atol=1e-6), name


def test_checkpoint_loads_in_plain_transformers(small_config, tmp_path):
    trainer = train(small_config("train.steps=1"), tmp_path / "run")
    checkpoint = latest_checkpoint(tmp_path / "run" / "checkpoints")
    reloaded = AutoModelForImageTextToText.from_pretrained(checkpoint)
    for (name, p), (_, q) in zip(trainer.model.named_parameters(), reloaded.named_parameters()):
        assert torch.equal(p.detach(), q), name


def test_lora_with_kl_to_adapter_free_base(small_config, tmp_path):
    config = small_config("lora.enabled=true", "lora.r=4", "algo.beta=0.04", "train.steps=2", "train.precision=bf16")
    trainer = train(config, tmp_path / "run")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert trainer.reference.module is trainer.model  # no second copy: adapters are switched off instead
    assert all(r["kl"] >= 0 for r in rows) and rows[-1]["kl"] > 0  # the policy moved away from the base
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    reloaded, _ = load_model_and_processor(latest_checkpoint(tmp_path / "run" / "checkpoints"))
    saved = dict(reloaded.named_parameters())
    assert all(torch.equal(p.detach(), saved[n]) for n, p in trainer.model.named_parameters() if "lora_" in n)


def test_dynamic_sampling_drops_zero_variance_groups(small_config, tmp_path):
    # format reward is 0 for every completion of a random model: every group is zero-variance.
    config = small_config("algo.dynamic_sampling=true", "algo.max_resample_rounds=1",
                          "task.rewards={format: 1.0, share_of_threes: 0.0}", "train.steps=1")
    train(config, tmp_path / "run")
    row = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert row["zero_variance_frac"] == 1.0
    assert row["groups"] == 0 and row["rollout_rounds"] == 2


def test_dynamic_group_size_ppo_iterations_and_dapo_options_run(small_config, tmp_path):
    config = small_config("algo.dynamic_group_size=true", "algo.group_size_min=2", "algo.group_size_max=6",
                          "algo.num_iterations=2", "train.mini_batch_size=8", "train.steps=3",
                          "algo.loss_agg=seq-mean-token-sum-norm", "algo.overlong_buffer=2", "algo.mask_truncated=true")
    trainer = train(config, tmp_path / "run")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert len(rows) == 3
    assert all(2 <= r["group_size/min"] <= r["group_size/max"] <= 6 for r in rows)
    assert sum(trials for _, trials in trainer.group_sizes.counts.values()) == sum(
        r["groups"] * r["group_size/mean"] for r in rows
    )
