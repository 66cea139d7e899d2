"""What a step trains on under DAPO dynamic sampling and the dynamic group size."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.run_files import read_metrics
from mmgrpo.types import Sample

from tests.trainer.test_grpo_trainer import train
from tests.e2e.test_training_paths import fresh_trainer

# Zero-variance groups on demand: every completion of a prompt marked ``uniform`` scores 1
# (all rewards equal), any other prompt's group scores [1, 0, 0, ...] (informative).
MARKED_REWARD_PLUGIN = '''
from tasks import register_reward

@register_reward("uniform_if_marked")
def uniform_if_marked(completions, uniform=None, **_):
    return [1.0 if uniform or i == 0 else 0.0 for i in range(len(completions))]
'''


@pytest.fixture(scope="session")
def marked_reward_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plugin = tmp_path_factory.mktemp("plugins") / "marked_reward.py"
    plugin.write_text(MARKED_REWARD_PLUGIN)
    return plugin


def _upcoming_prompts(trainer: GRPOTrainer, count: int) -> list[Sample]:
    """The next ``count`` prompts the trainer will draw; its sampler is left where it was."""
    position = trainer.drawer.sampler.state_dict()
    upcoming = trainer.drawer.take(count)
    trainer.drawer.sampler.load_state_dict(position)
    return upcoming


def _record_trained_groups(trainer: GRPOTrainer, monkeypatch) -> list[list[str]]:
    """Per step, the sample ids of the groups the update trains on (the step batch's groups)."""
    trained: list[list[str]] = []
    build = trainer.batches.build

    def recording(rollouts, advantages):
        trained.append([group.sample.id for group in rollouts.groups])
        return build(rollouts, advantages)

    monkeypatch.setattr(trainer.batches, "build", recording)
    return trained


@pytest.mark.parametrize(
    ("uniform", "max_rounds", "trained", "rounds"),
    [
        ({0, 1, 4}, 0, [2, 3], 1),  # no resampling: half a batch
        ({0, 1, 4}, 2, [2, 3, 5, 6], 2),  # round 2 refills the batch (its 4th informative group is not needed)
        ({0, 1, 4, 5, 6}, 1, [2, 3, 7], 2),  # resample budget spent before the batch is full
    ],
    ids=["no-resampling", "refilled", "budget-spent"],
)
def test_dynamic_sampling_refills_with_informative_groups(
    small_config, marked_reward_plugin, tmp_path, monkeypatch, uniform, max_rounds, trained, rounds
):
    """Prompts are numbered in draw order, 4 per round: 0-3 the first round, 4-7 the second."""
    config = small_config(
        "algo.dynamic_sampling=true", f"algo.max_resample_rounds={max_rounds}", "train.steps=1",
        f"task.reward_plugins=[{marked_reward_plugin}]", "task.rewards={uniform_if_marked: 1.0}",
    )
    trainer = fresh_trainer(config, tmp_path / "run")
    upcoming = _upcoming_prompts(trainer, 2 * config.rollout.prompts_per_step)
    for index in uniform:
        upcoming[index].extra["uniform"] = True
    trained_ids = _record_trained_groups(trainer, monkeypatch)
    trainer.train()

    assert trained_ids == [[upcoming[i].id for i in trained]]
    row = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    drawn = rounds * config.rollout.prompts_per_step
    assert row["rollout_rounds"] == rounds and row["groups"] == len(trained)
    assert row["zero_variance_frac"] == len({i for i in uniform if i < drawn}) / drawn
    assert row["reward/total"] == pytest.approx(1 / config.rollout.num_generations)  # informative groups only
    assert row["advantage/abs_max"] > 0


def test_dynamic_sampling_with_every_group_uniform_skips_the_update(small_config, tmp_path):
    # format reward is 0 for every completion of a random model: every group is zero-variance.
    config = small_config("algo.dynamic_sampling=true", "algo.max_resample_rounds=1",
                          "task.rewards={format: 1.0, share_of_threes: 0.0}", "train.steps=1")
    train(config, tmp_path / "run")
    row = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert row["zero_variance_frac"] == 1.0
    assert row["groups"] == 0 and row["rollout_rounds"] == 2
    assert "loss" not in row


def test_dynamic_group_size_gives_uncertain_prompts_the_samples(small_config, tmp_path, monkeypatch):
    """Budget 4 x 4 = 16, sizes in [2, 6]: a prompt always solved and one never solved get the
    minimum; the two unseen prompts (success rate 1/2 under the prior) get the rest."""
    config = small_config(
        "algo.dynamic_group_size=true", "algo.group_size_min=2", "algo.group_size_max=6", "train.steps=1",
    )
    trainer = fresh_trainer(config, tmp_path / "run")
    solved, hopeless, *unseen = _upcoming_prompts(trainer, config.rollout.prompts_per_step)
    trainer.drawer.group_sizes.load_state_dict({"counts": {solved.id: [40, 40], hopeless.id: [0, 40]}})
    requested: dict[str, int] = {}
    generate = trainer.rollout_source.engine.generate

    def recording(samples, params, group_sizes, **kwargs):
        requested.update(zip([sample.id for sample in samples], group_sizes))
        return generate(samples, params, group_sizes, **kwargs)

    monkeypatch.setattr(trainer.rollout_source.engine, "generate", recording)
    trainer.train()

    assert requested == {solved.id: 2, hopeless.id: 2, unseen[0].id: 6, unseen[1].id: 6}
    row = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert (row["group_size/min"], row["group_size/max"], row["group_size/mean"]) == (2, 6, 4)
    counts = trainer.drawer.group_sizes.counts
    assert counts[solved.id][1] == 42 and counts[hopeless.id][1] == 42  # the step's outcomes were recorded
    assert counts[unseen[0].id][1] == counts[unseen[1].id][1] == 6


def test_dynamic_group_size_ppo_iterations_and_dapo_options_run(small_config, tmp_path):
    config = small_config("algo.dynamic_group_size=true", "algo.group_size_min=2", "algo.group_size_max=6",
                          "algo.num_iterations=2", "train.mini_batch_size=8", "train.steps=3",
                          "algo.loss_agg=seq-mean-token-sum-norm", "algo.overlong_buffer=2", "algo.mask_truncated=true")
    trainer = train(config, tmp_path / "run")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert len(rows) == 3
    assert all(2 <= r["group_size/min"] <= r["group_size/max"] <= 6 for r in rows)
    assert sum(trials for _, trials in trainer.drawer.group_sizes.counts.values()) == sum(
        r["groups"] * r["group_size/mean"] for r in rows
    )


def test_batch_scaled_advantages_of_a_rank_are_its_slice_of_the_whole_steps():
    """algo.scale=batch divides by the std of the whole step's rewards: under data parallelism each
    rank's advantages must be its slice of what one process computes over all ranks' groups."""
    from mmgrpo.algos import group_advantages
    from mmgrpo.trainer.rollouts import Group, Rollouts, rank_advantages
    from mmgrpo.types import Completion, Sample

    def part(rewards_per_group: list[list[float]]) -> Rollouts:
        return Rollouts(groups=[
            Group(Sample(f"s{i}", "t", []), [Completion("", [1])] * len(rewards), rewards, {})
            for i, rewards in enumerate(rewards_per_group)
        ])

    parts = [part([[0.0, 1.0], [0.0, 0.0, 1.0]]), part([[0.0, 10.0]])]  # rank 1's rewards spread far wider
    def of(rollouts: Rollouts) -> torch.Tensor:
        return group_advantages(rollouts.rewards(), rollouts.group_sizes, estimator="grpo", scale_std=True,
                                scale="batch", eps=1e-4)

    everything, mine = rank_advantages(parts, 1, of)
    whole = of(Rollouts.merged(parts))
    assert torch.equal(everything, whole) and torch.equal(mine, whole[5:])
    assert not torch.allclose(mine, of(parts[1]))  # what rank 1 alone would compute: its own std
    assert torch.equal(rank_advantages(parts, 0, of)[1], whole[:5])
