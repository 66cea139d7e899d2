"""A reward model in a GRPO run: named in task.reward_models, weighted in task.rewards, never trained."""

from __future__ import annotations

import math

import pytest
import torch

from mmgrpo.config import ConfigError
from mmgrpo.commands.preflight import preflight
from tasks import REWARDS

from tests.e2e.test_training_paths import fresh_trainer


@pytest.mark.parametrize("backbone", ["text", "vlm"])
def test_a_grpo_step_scores_with_the_reward_model_and_leaves_it_untouched(backbone, small_config, tmp_path,
                                                                          tiny_reward_models, tiny_vlm_reward_model):
    path = tiny_reward_models["classifier"] if backbone == "text" else tiny_vlm_reward_model()  # the VLM sees the images
    config = small_config(
        f"task.reward_models=[{{name: tiny_rm_{backbone}, path: {path}, batch_size: 8}}]",
        f"task.rewards={{tiny_rm_{backbone}: 1.0}}",
    )
    preflight(config, check_model=False)
    trainer = fresh_trainer(config, tmp_path / "run")
    policy_before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    reward_model, _ = REWARDS.get(f"tiny_rm_{backbone}").load()
    judge_before = {name: p.detach().clone() for name, p in reward_model.named_parameters()}

    metrics = trainer.step()

    name = f"reward/tiny_rm_{backbone}"
    assert math.isfinite(metrics[name]) and metrics[f"{name}/errors"] == 0
    assert metrics[f"{name}_std"] > 0  # scores differ by completion: the policy has a signal
    assert any(not torch.equal(policy_before[name], p) for name, p in trainer.model.named_parameters())
    assert all(torch.equal(judge_before[name], p) for name, p in reward_model.named_parameters())
    assert all(p.grad is None for p in reward_model.parameters())


def test_preflight_names_a_missing_reward_model_checkpoint(small_config, tmp_path):
    config = small_config(f"task.reward_models=[{{name: missing_rm, path: {tmp_path / 'nowhere'}}}]",
                          "task.rewards={missing_rm: 1.0}")
    with pytest.raises(ConfigError, match=r"task.reward_models\[0\].path: reward model .*nowhere' not found"):
        preflight(config, check_model=False)


def test_preflight_names_a_vlm_classifier_without_its_value_head(small_config, tiny_model_dir):
    config = small_config(f"task.reward_models=[{{name: headless_rm, path: {tiny_model_dir('qwen2_5_vl')}}}]",
                          "task.rewards={headless_rm: 1.0}")
    with pytest.raises(ConfigError, match=r"task.reward_models\[0\].path: .* VLM checkpoint without value_head"):
        preflight(config, check_model=False)
