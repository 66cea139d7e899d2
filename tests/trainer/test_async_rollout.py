"""rollout.mode=async: a worker process samples ahead of training, within the staleness bound.

Each trainer here starts a real worker process (a few seconds each: a fresh interpreter
loads torch, transformers and the tiny model).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from mmgrpo.trainer.checkpoint import latest_checkpoint
from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer import rollout_worker
from mmgrpo.trainer.rollout_worker import RolloutWorkerError
from mmgrpo.trainer.step_metrics import staleness_metrics
from mmgrpo.trainer.rollouts import Group
from mmgrpo.types import Sample

from tests.training import build_trainer_inputs, interrupt_step, reward_at_start_and_end
from tests.trainer.test_bad_rows import ledger_rows, with_image

ASYNC = ("rollout.mode=async", "rollout.worker_threads=1")
COMPARED = ("loss", "reward/total", "grad_norm", "entropy", "length/mean")


def build(config, run_dir: Path, *, checkpoint: Path | None = None) -> GRPOTrainer:
    torch.manual_seed(config.seed)  # LoRA adapters are initialised from it
    model, processor, train_set = build_trainer_inputs(config, run_dir, checkpoint=checkpoint)
    return GRPOTrainer(
        config, run_dir, model, processor, train_set, resume_from=checkpoint, reference_source=config.model.name_or_path
    )


def trained_ids(run_dir: Path) -> dict[int, list[str]]:
    """Per step, the sample ids of the groups trained on (from completions.jsonl)."""
    steps: dict[int, list[str]] = {}
    for line in (run_dir / "completions.jsonl").read_text().splitlines():
        record = json.loads(line)
        ids = steps.setdefault(record["step"], [])
        if record["sample_id"] not in ids:
            ids.append(record["sample_id"])
    return steps


@pytest.mark.parametrize("tuning", [
    pytest.param((), id="full"), pytest.param(("lora.enabled=true", "lora.r=4"), id="lora"),
    pytest.param(("model.freeze_vision_tower=true",), id="frozen-tower", marks=pytest.mark.slow),  # pushes skip it
])
def test_staleness_zero_trains_exactly_as_sync_mode(small_config, tmp_path, tuning):
    """max_staleness=0 is the sync schedule through the worker: same prompts, seeds, completions,
    losses and weights (the worker's copy gets every update, LoRA merged; a frozen tower only once)."""
    config = small_config("train.steps=4", "algo.beta=0.1", *tuning)
    sync = build(config, tmp_path / "sync")
    sync.train()
    asynchronous = build(small_config("train.steps=4", "algo.beta=0.1", *tuning, *ASYNC, "rollout.max_staleness=0"),
                         tmp_path / "async")
    asynchronous.train()

    sync_rows, async_rows = read_metrics(tmp_path / "sync" / "metrics.jsonl"), read_metrics(tmp_path / "async" / "metrics.jsonl")
    assert sync_rows[-1]["kl"] > 0  # the policy moved: later steps sample from updated weights
    for a, b in zip(sync_rows, async_rows, strict=True):
        assert b["async/staleness_max"] == 0 and b["async/staleness_0_frac"] == 1
        for key in COMPARED:
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (a["step"], key)
    for (name, p), (_, q) in zip(sync.model.named_parameters(), asynchronous.model.named_parameters()):
        assert torch.allclose(p, q, atol=1e-6), name
    assert asynchronous.rollout_source.worker.process.exitcode == 0  # train() stopped it cleanly


def test_one_step_off_policy_samples_ahead_and_never_past_the_bound(small_config, tmp_path, caplog):
    config = small_config("train.steps=5", "algo.is_correction=tis", *ASYNC, "rollout.max_staleness=1")
    with caplog.at_level("WARNING", logger="mmgrpo.trainer.grpo"):
        build(config, tmp_path / "run").train()
    assert not any("no off-policy correction" in record.getMessage() for record in caplog.records)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert all(row["async/staleness_max"] <= 1 for row in rows)
    assert rows[0]["async/staleness_max"] == 0  # the first batch comes from the initial policy
    assert rows[1]["async/staleness_1_frac"] == 1  # batch 2 was sampled while step 1 trained
    assert all(row["async/worker_seconds"] > 0 for row in rows)
    assert all("rollout/is_ratio_mean" in row for row in rows)


def test_the_worker_is_told_which_weights_no_update_changes(small_config, tmp_path, monkeypatch):
    """A frozen tower reaches the worker with its first weights only; the worker marks its copy with the trainer's
    names (``mark_unchanging``), so a vLLM engine there leaves the tower out of its pushes as the trainer's do."""
    import mmgrpo.trainer.async_rollouts as async_rollouts

    specs, real = [], async_rollouts.RolloutWorker
    monkeypatch.setattr(async_rollouts, "RolloutWorker",
                        lambda spec, *args, **kwargs: specs.append(spec) or real(spec, *args, **kwargs))
    config = small_config("train.steps=1", *ASYNC, "model.freeze_vision_tower=true")
    build(config, tmp_path / "run").train()
    (spec,) = specs
    assert spec.unchanging and all(name.startswith("model.visual.") for name in spec.unchanging)


@pytest.mark.parametrize(("cut", "every"), [("stop", 0), ("kill", 2)])
def test_a_resumed_run_trains_on_what_the_uninterrupted_run_did(small_config, tmp_path, monkeypatch, cut, every):
    """The batches requested but not trained on at a checkpoint are kept with the rounds already sampled
    of them, so the resumed run trains on the same prompts, completions and rewards, in the same order, as
    the uninterrupted one, to the same weights: after a stop in step 3 (the emergency checkpoint of step
    2, which asks the live worker for them) and after a crash without one in step 3 (like ``kill -9``: the
    periodic checkpoint of step 2)."""
    overrides = ("train.steps=4", "log.log_completions_every=1", "log.completions_per_log=1000", *ASYNC,
                 "rollout.max_staleness=2", f"checkpoint.every_n_steps={every}", "algo.is_correction=tis")
    full = build(small_config(*overrides), tmp_path / "full")
    full.train()

    failure = KeyboardInterrupt if cut == "stop" else SystemExit  # SystemExit: no emergency save
    restore_step = interrupt_step(monkeypatch, 2, failure)
    with pytest.raises(failure):
        build(small_config(*overrides), tmp_path / "half").train()
    checkpoint = latest_checkpoint(tmp_path / "half" / "checkpoints")
    assert checkpoint.name == "step-2"
    restore_step()
    resumed = build(small_config(*overrides), tmp_path / "half", checkpoint=checkpoint)
    resumed.train()

    assert trained_ids(tmp_path / "half") == trained_ids(tmp_path / "full")
    for expected, got in zip(read_metrics(tmp_path / "full" / "metrics.jsonl"),
                             read_metrics(tmp_path / "half" / "metrics.jsonl")):
        for key in (*COMPARED, "kl", "async/staleness_mean", "is/weight_mean"):
            assert got.get(key) == expected.get(key), (expected["step"], key)
    assert all(torch.equal(a, b) for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()))


def test_a_batch_is_sampled_by_the_policy_it_was_requested_under_however_late_the_worker_takes_it(small_config, tmp_path):
    """Batch 2 is requested under version 0 and still queued behind batch 1 when version 1 is published: it
    is sampled by version 0 all the same (a worker that took the newest weights made a run's staleness, and
    its resume, depend on timing: the resume test above failed now and then on a faster machine)."""
    trainer = build(small_config(*ASYNC, "rollout.max_staleness=2", "algo.is_correction=tis"), tmp_path / "run")
    source = trainer.rollout_source
    try:
        versions = []
        for step in range(3):
            rollouts = source.next_round(step, 0)  # tops the requests up to 3 under the current version
            versions.append({group.policy_version for group in rollouts.groups})
            source.publish_weights()  # the worker is sampling the next batch, and the one after waits
        versions += [{group.policy_version for group in source.next_round(3, 0).groups}]
    finally:
        source.close()
    assert versions == [{0}, {0}, {0}, {1}]


def test_worker_skips_a_bad_image_and_counts_it(small_config, tmp_path, bad_images):
    config = small_config("data.shuffle=false", "train.steps=2", *ASYNC)
    run_dir = tmp_path / "run"
    model, processor, train_set = build_trainer_inputs(config, run_dir)
    bad = train_set.samples[1] = with_image(train_set.samples[1], bad_images["truncated_jpeg"])
    GRPOTrainer(config, run_dir, model, processor, train_set).train()

    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]  # the worker went on after the bad sample
    assert rows[0]["dropped_prompts"] == 1 and rows[0]["groups"] == 3
    (row,) = ledger_rows(run_dir)
    assert (row["row_id"], row["reason"], row["stage"]) == (bad.id, "corrupt media", "grpo")


def test_a_dead_worker_stops_the_run_with_a_clear_error_and_a_checkpoint(small_config, tmp_path):
    trainer = build(small_config("train.steps=3", *ASYNC), tmp_path / "run")
    trainer.rollout_source.worker.process.kill()
    with pytest.raises(RolloutWorkerError, match="exited with code -9"):
        trainer.train()
    assert latest_checkpoint(tmp_path / "run" / "checkpoints").name == "step-0"


def test_an_error_in_the_worker_stops_the_run_with_its_traceback(small_config, tmp_path, monkeypatch):
    """A batch the worker fails on (here: a sample of a task the run has no scoring rule for) is
    reported with the worker's traceback; the trainer saves, stops the worker and leaves no process. (The
    worker may be sampling the next batch when asked to stop: on a loaded machine that outlasted the 10 s grace.)"""
    monkeypatch.setattr(rollout_worker, "STOP_GRACE_S", 120.0)
    config = small_config("data.shuffle=false", "train.steps=2", *ASYNC)
    run_dir = tmp_path / "run"
    model, processor, train_set = build_trainer_inputs(config, run_dir)
    train_set.samples[0] = dataclasses.replace(train_set.samples[0], task="no_such_task")
    trainer = GRPOTrainer(config, run_dir, model, processor, train_set)
    with pytest.raises(RolloutWorkerError, match=r"failed on batch 0:\n(.|\n)*KeyError: 'no_such_task'"):
        trainer.train()
    assert latest_checkpoint(run_dir / "checkpoints").name == "step-0"
    assert trainer.rollout_source.worker.process.exitcode == 0


def test_dynamic_sampling_group_sizes_and_eval_run_in_async_mode(small_config, tmp_path, caplog):
    from mmgrpo.trainer.pipeline import run_training

    config = small_config(
        "train.steps=3", "algo.dynamic_sampling=true", "algo.max_resample_rounds=2", "algo.dynamic_group_size=true",
        "algo.group_size_min=2", "algo.group_size_max=6", "eval.every_n_steps=2", "eval.limit=4", *ASYNC,
    )
    with caplog.at_level("WARNING", logger="mmgrpo.trainer.grpo"):
        summary = run_training(config)
    assert any("no off-policy correction" in record.getMessage() for record in caplog.records)  # staleness 1, none
    rows = read_metrics(Path(config.log.output_dir) / "test" / "metrics.jsonl")
    assert summary["grpo_steps"] == 3 and "eval/accuracy" in rows[1]
    assert max(row["rollout_rounds"] for row in rows) > 1  # a step took a second batch from the worker
    assert all(row["async/staleness_max"] <= 1 for row in rows)


@pytest.mark.parametrize("stop", ["SIGKILL", "SIGINT"])
def test_the_worker_never_outlives_its_trainer(small_config, tmp_path, stop):
    """A killed trainer (SIGKILL: no clean-up runs) and a Ctrl-C'd one both leave no worker behind."""
    config = small_config("train.steps=1000", "eval.before=false", "eval.after=false", *ASYNC)
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    trainer = subprocess.Popen([sys.executable, "-m", "mmgrpo", "train", str(recipe)], start_new_session=True)
    try:
        server, worker = _wait_for_worker(trainer.pid, tmp_path / "runs" / "test" / "metrics.jsonl")
        if stop == "SIGINT":
            os.killpg(trainer.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
            assert trainer.wait(60) == 130
            assert latest_checkpoint(tmp_path / "runs" / "test" / "checkpoints") is not None
        else:
            trainer.kill()
            trainer.wait(60)
        worker.wait(30)  # raises psutil.TimeoutExpired if the worker stays
        server.wait(30)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group: a worker or fork server left by a failure too
            os.killpg(trainer.pid, signal.SIGKILL)


def _wait_for_worker(pid: int, metrics: Path, timeout_s: float = 180.0) -> tuple[psutil.Process, psutil.Process]:
    """The trainer's fork server and the worker forked from it, once the trainer has logged a step (so all run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = psutil.Process(pid).children()
        if children and metrics.is_file() and metrics.read_text().strip():
            (server,) = [child for child in children if "forkserver" in " ".join(child.cmdline())]
            (worker,) = server.children()
            return server, worker
        time.sleep(0.5)
    raise TimeoutError("the trainer logged no step with its worker running")


def test_staleness_metrics_histogram():
    def group(version: int | None) -> Group:
        return Group(Sample("s", "t", []), [], [], {}, policy_version=version)

    metrics = staleness_metrics([group(5), group(4), group(4), group(3)], version=5, max_staleness=2)
    assert metrics == {
        "async/staleness_mean": 1.0, "async/staleness_max": 2.0,
        "async/staleness_0_frac": 0.25, "async/staleness_1_frac": 0.5, "async/staleness_2_frac": 0.25,
    }


@pytest.mark.slow
@pytest.mark.parametrize("estimator", [(), ("algo.advantage_estimator=remax", "train.lr=0.05")], ids=["grpo", "remax"])
def test_reward_rises_under_async_grpo(small_config, tmp_path, estimator):
    """Fails if the policy-gradient sign is flipped or advantages are zeroed, as the sync test; ReMax's greedy
    baselines come from the worker's engine."""
    config = small_config(
        "train.steps=40", "rollout.num_generations=8", "algo.is_correction=tis", *ASYNC, "rollout.max_staleness=1",
        *estimator,
    )
    build(config, tmp_path / "run").train()
    first, last = reward_at_start_and_end(tmp_path / "run")
    assert last > first + 0.25, f"reward did not rise: first steps {first:.3f}, last steps {last:.3f}"
    if estimator:
        assert all(row["reward/greedy_frac"] == 1.0 for row in read_metrics(tmp_path / "run" / "metrics.jsonl"))


def test_batches_in_flight_are_shared_out_again_for_any_number_of_ranks():
    from mmgrpo.trainer.prompt_drawer import RolloutRequest, ranks_share

    def batch(number, indices, sizes):
        return RolloutRequest(number, tuple(indices), tuple(sizes)).to_dict()

    recorded = [[batch(3, [0, 1], [8, 8]), batch(4, [4, 5], [8, 6])],  # rank 0's two batches in flight
                [batch(3, [2, 3], [8, 4]), batch(4, [6, 7], [2, 8])]]  # rank 1's parts of the same batches
    assert [ranks_share(recorded, rank, 2) for rank in (0, 1)] == [
        [RolloutRequest.from_dict(part) for part in recorded[rank]] for rank in (0, 1)]
    assert ranks_share(recorded, 0, 1) == [RolloutRequest(3, (0, 1, 2, 3), (8, 8, 8, 4)),
                                           RolloutRequest(4, (4, 5, 6, 7), (8, 6, 2, 8))]
    assert ranks_share(recorded, 3, 4)[1] == RolloutRequest(4, (7,), (8,))
    one_process = [batch(5, [9, 1], [8, 8])]  # checkpoints written before ranks were recorded
    assert ranks_share(one_process, 0, 1) == [RolloutRequest(5, (9, 1), (8, 8))]
    assert ranks_share([], 0, 2) == [] and ranks_share([[], []], 1, 2) == []
