"""The engine's log-probs in the update: the logged gap to the trainer's, and as old log-probs."""

from __future__ import annotations

import math

import pytest

from mmgrpo.rollout import ENGINES, HFEngine

from mmgrpo.run_files import read_metrics
from tests.trainer.test_grpo_trainer import train

OFFSET = 0.5


@ENGINES.register("test-offset-logprobs")
class OffsetLogprobsEngine(HFEngine):
    """The HF engine reporting every sampled token's log-prob OFFSET too high (a mis-synced sampler)."""

    def generate(self, *args, **kwargs):
        groups = super().generate(*args, **kwargs)
        for completion in (c for group in groups for c in group):
            completion.logprobs = [value + OFFSET for value in completion.logprobs]
        return groups


@pytest.mark.parametrize("num_iterations", [1, 2])
def test_the_gap_to_the_trainers_logprobs_is_logged(small_config, tmp_path, num_iterations: int) -> None:
    for engine, expected_gap in (("hf", 0.0), ("test-offset-logprobs", OFFSET)):
        run = tmp_path / f"{engine}-{num_iterations}"
        train(small_config(f"rollout.engine={engine}", f"algo.num_iterations={num_iterations}"), run)
        for row in read_metrics(run / "metrics.jsonl"):
            assert row["rollout/logprob_gap_mean"] == pytest.approx(expected_gap, abs=1e-4)
            assert row["rollout/logprob_gap_max"] == pytest.approx(expected_gap, abs=1e-4)


def test_engine_logprobs_become_the_old_logprobs_of_the_ratio(small_config, tmp_path) -> None:
    overrides = ("rollout.engine=test-offset-logprobs", "train.steps=2")
    train(small_config(*overrides), tmp_path / "trainer")
    train(small_config(*overrides, "rollout.logprobs_source=engine"), tmp_path / "engine")
    recomputed = read_metrics(tmp_path / "trainer" / "metrics.jsonl")[0]
    from_engine = read_metrics(tmp_path / "engine" / "metrics.jsonl")[0]
    assert recomputed["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert from_engine["ratio_mean"] == pytest.approx(math.exp(-OFFSET), abs=1e-4)
    assert from_engine["rollout/logprob_gap_mean"] == pytest.approx(OFFSET, abs=1e-4)


def test_tis_weights_each_token_by_the_capped_trainer_to_sampler_ratio(small_config, tmp_path) -> None:
    # the sampler claims every token is e^0.5 more likely than the trainer finds it: ratio e^-0.5 < cap
    overrides = ("rollout.engine=test-offset-logprobs", "train.steps=2")
    train(small_config(*overrides, "algo.is_correction=tis"), tmp_path / "tis")
    train(small_config(*overrides), tmp_path / "plain")
    tis = read_metrics(tmp_path / "tis" / "metrics.jsonl")[0]
    plain = read_metrics(tmp_path / "plain" / "metrics.jsonl")[0]
    assert tis["rollout/is_ratio_mean"] == pytest.approx(math.exp(-OFFSET), abs=1e-4)
    assert tis["rollout/is_capped_frac"] == 0.0
    assert tis["pg_loss"] == pytest.approx(plain["pg_loss"] * math.exp(-OFFSET), abs=1e-5)


def test_mis_drops_every_token_whose_ratio_exceeds_the_cap(small_config, tmp_path) -> None:
    # ratio e^-0.5 ~ 0.61 everywhere: a cap of 0.5 drops every token, so nothing is learned from the step
    overrides = ("rollout.engine=test-offset-logprobs", "train.steps=1", "algo.is_correction=mis", "algo.is_cap=0.5")
    train(small_config(*overrides), tmp_path / "mis")
    row = read_metrics(tmp_path / "mis" / "metrics.jsonl")[0]
    assert row["rollout/is_capped_frac"] == 1.0 and row["grad_norm"] == 0.0 and "pg_loss" not in row
