"""Helpers for trainer tests: a small config on the tiny Qwen2.5-VL and generated counting data."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Callable

import pytest

from mmgrpo.config import Config, load_config
from mmgrpo.run_files import read_metrics
from mmgrpo.inputs import load_samples, pick_device, task_model_info
from mmgrpo.trainer.setup import load_policy

# A reward that is easy to climb from a random model: the share of completion characters
# that are the digit "3". A trainer that follows its policy gradient raises it within a
# few dozen steps; a flipped sign lowers it, zero advantages leave it flat.
DIGIT_REWARD_PLUGIN = '''
from tasks import register_reward

@register_reward("share_of_threes")
def share_of_threes(completions, **_):
    return [text.count("3") / max(1, len(text)) for text in completions]

@register_reward("text_length")
def text_length(completions, **_):
    return [len(text) / 32 for text in completions]
'''


# Completions of the random tiny model differ in length in nearly every group, so with this
# reward the policy moves at every step; a '3' is rare, so share_of_threes may leave it still.
DENSE_REWARD = "task.rewards={text_length: 1.0}"


@pytest.fixture(scope="session")
def digit_reward_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One plugin file per session: a reward name can be registered only once per process."""
    plugin = tmp_path_factory.mktemp("plugins") / "digit_reward.py"
    plugin.write_text(DIGIT_REWARD_PLUGIN)
    return plugin


@pytest.fixture()
def small_config(tmp_path: Path, tiny_qwen25vl: Path, digit_reward_plugin: Path) -> Callable[..., Config]:
    """``small_config(*overrides)``: a fast GRPO config writing under ``tmp_path``."""
    plugin = digit_reward_plugin

    def make(*overrides: str) -> Config:
        base = [
            f"model.name_or_path={tiny_qwen25vl}",
            f"log.output_dir={tmp_path / 'runs'}",
            "log.run_name=test",
            "log.progress_bar=false",
            "log.tensorboard=false",
            f"data.dir={tmp_path / 'data'}",
            "data.train.0.recipe_args={n: 40, test_fraction: 0.2}",
            "data.test.0.recipe_args={n: 40, test_fraction: 0.2}",
            f"task.reward_plugins=[{plugin}]",
            "task.rewards={share_of_threes: 1.0}",
            "rollout.prompts_per_step=4",
            "rollout.num_generations=4",
            "rollout.max_new_tokens=6",
            "train.micro_batch_size=8",
            "train.steps=4",
            "train.lr=0.01",
            "train.lr_schedule=constant",
            "sft.enabled=false",
            "checkpoint.every_n_steps=0",
        ]
        return load_config(None, [*base, *overrides])

    return make


def build_trainer_inputs(config: Config, run_dir: Path, *, checkpoint: Path | None = None):
    """(model, processor, train samples) as ``run_training`` would build them."""
    device = pick_device(config.train.device)
    train_set = load_samples(config.data.train, config.task, Path(config.data.dir), seed=config.data.seed,
                             model=task_model_info(config.model, config.model.name_or_path))
    model, processor = load_policy(config, config.model.name_or_path, device, checkpoint=checkpoint)
    run_dir.mkdir(parents=True, exist_ok=True)
    return model, processor, train_set


def reward_at_start_and_end(run_dir: Path, key: str = "reward/total", window: int = 5) -> tuple[float, float]:
    """Mean of ``key`` over the first and over the last ``window`` GRPO steps of a finished run."""
    rewards = [row[key] for row in read_metrics(run_dir / "metrics.jsonl")]
    return statistics.mean(rewards[:window]), statistics.mean(rewards[-window:])


def interrupt_step(monkeypatch: pytest.MonkeyPatch, step_index: int) -> Callable[[], None]:
    """Make ``GRPOTrainer.step`` raise KeyboardInterrupt (a Ctrl-C) when ``step_index`` steps are done;
    returns the function that puts the real step back."""
    from mmgrpo.trainer.grpo import GRPOTrainer

    real_step = GRPOTrainer.step

    def interrupted(self: GRPOTrainer) -> dict[str, float]:
        if self.step_index == step_index:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(GRPOTrainer, "step", interrupted)
    return lambda: monkeypatch.setattr(GRPOTrainer, "step", real_step)
