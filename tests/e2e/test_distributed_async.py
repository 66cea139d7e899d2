"""``mmgrpo train`` on 2 ranks with a rollout worker each (async mode under FSDP2): as sync mode at staleness
0, and a stopped run resumes its batches in flight."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgrpo.run_files import read_metrics
from tests.e2e.ranks import STEPS, stopped_after_step_one, succeeded, torchrun_train

pytestmark = pytest.mark.distributed


def _trained_ids(run: Path) -> dict[int, list[str]]:
    """Per step, the sample ids of the groups trained on, every rank's (completions.jsonl)."""
    steps: dict[int, list[str]] = {}
    for record in read_metrics(run / "completions.jsonl"):
        ids = steps.setdefault(record["step"], [])
        if record["sample_id"] not in ids:
            ids.append(record["sample_id"])
    return steps


ASYNC = ("rollout.mode=async", "rollout.worker_threads=1")


def _async_configs(small_config, tmp_path: Path, backend: list[str], variants: dict[str, tuple[str, ...]]) -> dict[str, Path]:
    """A recipe per variant of one 2-rank run, logging every rank's completions every step."""
    common = (f"train.steps={STEPS}", "algo.beta=0.04", "eval.before=false", "eval.after=false",
              "log.log_completions_every=1", "log.completions_per_log=100", *backend)
    recipes = {}
    for name, overrides in variants.items():
        recipes[name] = tmp_path / f"{name}.yaml"
        small_config(*common, *overrides).save_yaml(recipes[name])
    return recipes


def test_two_ranks_with_a_rollout_worker_each_train_as_sync_mode_and_resume_their_batches_in_flight(
    small_config, tmp_path
):
    """Each rank's worker samples its share of the prompts with sync mode's per-rank seeds from the
    rank's whole weights, gathered one tensor at a time from the FSDP2 shards (ZeRO-3 gathers the same
    way, through the same whole-weights iterator): at max_staleness=0 the run is the sync run. One step
    off-policy, a stop records every rank's batches in flight and the resumed run trains on the sync
    run's prompts in the same order. (ZeRO-2 and one process hand over the module's own weights: the
    single-process tests cover that path.)"""
    backend = ["train.backend=fsdp2"]
    recipes = _async_configs(small_config, tmp_path, backend, {
        "sync": (), "async0": (*ASYNC, "rollout.max_staleness=0"),
        "async1": (*ASYNC, "rollout.max_staleness=1", "algo.is_correction=tis", "checkpoint.every_n_steps=1")})
    output = Path(small_config().log.output_dir)
    for name in ("sync", "async0"):
        succeeded(torchrun_train(str(recipes[name]), f"log.run_name={name}"))
    sync_rows, async_rows = (read_metrics(output / name / "metrics.jsonl") for name in ("sync", "async0"))
    assert sync_rows[-1]["kl"] > 0  # later steps sample from updated weights
    for expected, got in zip(sync_rows, async_rows, strict=True):
        assert got["async/staleness_max"] == 0
        for key in ("loss", "reward/total", "grad_norm", "length/mean"):
            assert got[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), (expected["step"], key)
    assert _trained_ids(output / "async0") == _trained_ids(output / "sync")

    stopped_after_step_one(torchrun_train(str(recipes["async1"]), "log.run_name=cut", stop_in_step=2),
                            output / "cut" / "checkpoints")
    succeeded(torchrun_train(str(recipes["async1"]), "log.run_name=cut", "--resume"))
    assert max(row["async/staleness_max"] for row in read_metrics(output / "cut" / "metrics.jsonl")) == 1
    assert _trained_ids(output / "cut") == _trained_ids(output / "sync")
