"""Helpers of the training tests (unit and whole runs): the digit reward plugin, a dense reward, building a
trainer's inputs, reward at the start and end of a run, interrupting a step. Their fixtures (``small_config``,
``digit_reward_plugin``) are in ``tests/conftest.py``."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Callable, Hashable, TypeVar

import pytest

from mmgrpo.config import Config, load_config
from mmgrpo.run_files import read_metrics
from mmgrpo.inputs import load_samples, pick_device, task_model_info
from mmgrpo.trainer.setup import load_policy

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

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


def built_once(build: Callable[[K], V]) -> Callable[[K], V]:
    """``build`` made once per key, and a failure kept as well: the tests that share a costly result (a launch, a
    trained policy) run it once, and a failed build fails each of them without being run again."""
    made: dict[K, V] = {}
    failed: dict[K, Exception] = {}

    def get(key: K) -> V:
        if key in failed:
            raise failed[key]
        if key not in made:
            try:
                made[key] = build(key)
            except Exception as failure:  # raised again for each test that asks
                failed[key] = failure
                raise
        return made[key]

    return get


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


def interrupt_step(
    monkeypatch: pytest.MonkeyPatch, step_index: int, failure: type[BaseException] = KeyboardInterrupt
) -> Callable[[], None]:
    """Make ``GRPOTrainer.step`` raise ``failure`` (default KeyboardInterrupt, a Ctrl-C; SystemExit ends a
    run without its emergency checkpoint, as ``kill -9`` would) when ``step_index`` steps are done; returns
    the function that puts the real step back."""
    from mmgrpo.trainer.grpo import GRPOTrainer

    real_step = GRPOTrainer.step

    def interrupted(self: GRPOTrainer) -> dict[str, float]:
        if self.step_index == step_index:
            raise failure
        return real_step(self)

    monkeypatch.setattr(GRPOTrainer, "step", interrupted)
    return lambda: monkeypatch.setattr(GRPOTrainer, "step", real_step)


def small_run_config(root: Path, model: Path, plugin: Path, *overrides: str) -> Config:
    """A fast GRPO config of ``model`` writing under ``root``, scored by the digit reward ``plugin``."""
    base = [
        f"model.name_or_path={model}",
        f"log.output_dir={root / 'runs'}",
        "log.run_name=test",
        "log.progress_bar=false",
        "log.tensorboard=false",
        f"data.dir={root / 'data'}",
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


# The zoom task with a cold start on its demonstrations: the SFT policy calls ``zoom_in`` (the tool tests start GRPO
# from it: ``zoom_policy`` in tests/conftest.py).
ZOOM = (
    "data.train.0.recipe=zoom_texture", "data.test.0.recipe=zoom_texture", "task.name=zoom_texture", "task.rewards={}",
    "task.reward_plugins=[]", "rollout.tools=[zoom_in]", "rollout.max_turns=2", "rollout.max_new_tokens=96",
    "sft.enabled=true", "sft.steps=100", "sft.batch_size=8", "sft.micro_batch_size=8", "sft.lr=0.003",
    "train.steps=2", "train.lr=0.0005", "eval.before=false", "eval.after=false",
)


def tool_use(run: Path) -> list[dict]:
    """The metrics of a 2-step zoom run, checked: every step's policy called the tool and saw its crops."""
    rows = read_metrics(run / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:  # the SFT policy calls the tool in some trajectories (19-44% measured), and sees its crops
        assert row["tools/calls_per_completion"] > 0.05 and row["tools/ok_frac"] > 0, row
        assert row["tools/images_per_completion"] > 0 and row["tools/observation_tokens"] > 0, row
    return rows
