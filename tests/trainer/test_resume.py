"""Checkpoints hold no pickle; resume continues the same timeline, logs and config; stops save and exit non-zero."""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mmgrpo.cli import build_parser, main
from mmgrpo.commands.config import config_from_args
from mmgrpo.distributed import Ranks
from mmgrpo.trainer import grpo as grpo_module
from mmgrpo.trainer import sft as sft_module
from mmgrpo.trainer.checkpoint import (
    TrainerState, capture_rng_state, latest_checkpoint, load_trainer_state, save_checkpoint, step_dirs,
)
from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.trainer.interrupts import Interrupted, exit_code, signals_allowed, signals_deferred, stop_on_signals
from mmgrpo.trainer.metrics import MetricsLogger
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.optim import build_optimizer, build_scheduler
from mmgrpo.trainer.pipeline import run_training
from mmgrpo.trainer.resume import RunFolderError, plan_resume

from tests.training import DENSE_REWARD
from tests.trainer.test_grpo_trainer import train
from tests.e2e.test_run_outputs import TinySaver


# -- the trainer state on disk ---------------------------------------------------------------
def _trained_optimizer() -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    optimizer = build_optimizer(model, lr=0.1, weight_decay=0.1, betas=(0.8, 0.95))
    scheduler = build_scheduler(optimizer, total_steps=10, warmup_ratio=0.2, schedule="cosine")
    for _ in range(3):
        model(torch.randn(2, 3)).pow(2).sum().backward()
        optimizer.step()
        scheduler.step()
    return optimizer, scheduler


def _assert_same(a, b, where="state") -> None:  # noqa: ANN001
    """Equal values of equal types, recursively (tensors: equal dtype, shape and values)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{index}]")
    else:
        assert a == b, where


def test_optimizer_scheduler_and_rng_states_round_trip_exactly(tmp_path):
    optimizer, scheduler = _trained_optimizer()
    random.random(), np.random.rand(), torch.rand(1)  # generators mid-stream, not freshly seeded
    state = TrainerState(
        step=3, optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(), data={"epoch": 1, "position": 5},
        extra={"group_sizes": {"counts": {"a": [1, 2]}}}, reference="/models/base",
    )
    rng = capture_rng_state()
    save_checkpoint(tmp_path, TinySaver(), None, state, rng=rng)
    loaded = load_trainer_state(tmp_path / "step-3")
    _assert_same(loaded.optimizer, optimizer.state_dict(), "optimizer")
    _assert_same(loaded.scheduler, scheduler.state_dict(), "scheduler")
    _assert_same(loaded.rng, rng, "rng")
    assert (loaded.step, loaded.data, loaded.extra, loaded.reference) == (3, state.data, state.extra, "/models/base")
    fresh, _ = _trained_optimizer()
    fresh.load_state_dict(loaded.optimizer)  # torch accepts it as its own


@dataclass(frozen=True)
class MainOfTwoRanks(Ranks):
    """Rank 0 of 2 in one process: the other rank gathers ``other``; no collective waits."""

    other: Any = None

    def gather(self, value: Any) -> list[Any]:
        return [value, self.other]

    def broadcast_object(self, value: Any) -> Any:
        return value

    def barrier(self) -> None:
        pass


def test_every_ranks_generator_states_are_recorded_and_each_rank_resumes_its_own(tmp_path):
    """Each rank draws its LoRA dropout masks from its own torch generator: a resume on as many ranks gives
    each rank its own states back, on another number of ranks the main process's."""
    torch.manual_seed(1)
    other = capture_rng_state()
    torch.manual_seed(0)
    mine = capture_rng_state()
    backend = SimpleNamespace(ranks=MainOfTwoRanks(world_size=2, other=other), shards_weights=False,
                              save_optimizer=lambda folder: None)
    save_checkpoint(tmp_path, TinySaver(), None, TrainerState(step=1), rng=mine, backend=backend)
    loaded = load_trainer_state(tmp_path / "step-1")
    _assert_same(loaded.rng_of(0, 2), mine, "rank 0")
    _assert_same(loaded.rng_of(1, 2), other, "rank 1")
    _assert_same(loaded.rng_of(0, 1), mine, "rank 0 of 1")


class _Payload:
    """Unpickling this creates ``marker``: what a hostile checkpoint would do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (Path.touch, (self.marker,))


def test_loading_a_checkpoint_never_unpickles(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, TinySaver(), None, TrainerState(step=1))
    marker = tmp_path / "code-ran"
    for name in ("trainer_state.pt", "trainer_state.json", "trainer_state.safetensors"):
        (tmp_path / "step-1" / name).write_bytes(pickle.dumps({"step": _Payload(marker)}))
    with pytest.raises(Exception):  # noqa: B017 - not a state file: refused, whichever way
        load_trainer_state(tmp_path / "step-1")
    assert not marker.exists(), "loading the checkpoint ran code from it"

    save_checkpoint(tmp_path, TinySaver(), None, TrainerState(step=2, optimizer=_trained_optimizer()[0].state_dict()))

    def refuse(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the trainer state was unpickled")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert load_trainer_state(tmp_path / "step-2").step == 2


def test_a_save_removes_staging_folders_left_by_a_killed_save(tmp_path):
    leftovers = [tmp_path / ".tmp-step-5-4242", tmp_path / ".old-step-3-4242"]
    for folder in leftovers:
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half")
    save_checkpoint(tmp_path, TinySaver(), None, TrainerState(step=6))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-6"]


# -- per-step logs ---------------------------------------------------------------------------
def test_resume_trims_every_per_step_log(tmp_path):
    first = MetricsLogger(tmp_path, tensorboard=True)
    for step in range(1, 6):
        first.log(step, {"reward/total": step / 10})
    first.close()
    with open(tmp_path / "completions.jsonl", "w") as handle:  # as the trainer writes it
        handle.writelines(json.dumps({"step": step, "completion": f"old {step}"}) + "\n" for step in (2, 4))

    resumed = MetricsLogger(tmp_path, tensorboard=True, resume_step=3)
    resumed.log(4, {"reward/total": 0.99})
    resumed.close()

    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    assert [row["completion"] for row in read_metrics(tmp_path / "completions.jsonl")] == ["old 2"]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("reward/total")
    assert [s.step for s in scalars] == [1, 2, 3, 4]
    assert scalars[-1].value == pytest.approx(0.99)


def test_a_torn_last_line_is_dropped_and_resume_goes_on(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n{"step": 3, "lo')
    assert [row["step"] for row in read_metrics(path)] == [1, 2]
    MetricsLogger(tmp_path, tensorboard=False, resume_step=2).close()
    assert path.read_text() == '{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n'

    path.write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl, line 2"):
        read_metrics(path)


# -- the trainer: timelines, failures, signals -----------------------------------------------
def test_resuming_an_older_checkpoint_retires_the_later_ones(small_config, tmp_path):
    run = tmp_path / "run"
    train(small_config("train.steps=3", "checkpoint.every_n_steps=1", "checkpoint.keep_last=null"), run)
    assert [step for step, _ in step_dirs(run / "checkpoints")] == [1, 2, 3]

    config = small_config("train.steps=2", "checkpoint.every_n_steps=1", "checkpoint.keep_last=2")
    train(config, run, resume_from=run / "checkpoints" / "step-1")
    assert [step for step, _ in step_dirs(run / "checkpoints")] == [1, 2]
    assert latest_checkpoint(run / "checkpoints").name == "step-2"  # never the abandoned step-3
    [abandoned] = (run / "checkpoints").glob("abandoned-*after-step-1")
    assert sorted(p.name for p in abandoned.iterdir()) == ["step-2", "step-3"]


def test_an_error_inside_a_step_saves_the_last_finished_step(small_config, tmp_path, monkeypatch):
    real_step = GRPOTrainer.step

    def fail_at_step_three(self):  # noqa: ANN001, ANN202
        if self.step_index == 2:
            raise RuntimeError("reward server down")
        return real_step(self)

    monkeypatch.setattr(GRPOTrainer, "step", fail_at_step_three)
    with pytest.raises(RuntimeError, match="reward server down"):
        train(small_config("train.steps=4"), tmp_path / "run")
    assert latest_checkpoint(tmp_path / "run" / "checkpoints").name == "step-2"
    assert load_trainer_state(tmp_path / "run" / "checkpoints" / "step-2").step == 2


def test_sigterm_stops_the_run_with_143_and_resume_finishes_it(small_config, tmp_path, monkeypatch):
    config = small_config("train.steps=3", "eval.before=false", "eval.after=false")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    real_collect, calls = grpo_module.collect_rollouts, []

    def preempted_in_second_rollout(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler's preemption, in the middle of step 2
        return real_collect(*args, **kwargs)

    monkeypatch.setattr(grpo_module, "collect_rollouts", preempted_in_second_rollout)
    assert main(["train", str(recipe)]) == 143
    run = Path(config.log.output_dir) / config.log.run_name
    assert latest_checkpoint(run / "checkpoints").name == "step-1"
    assert not (run / "summary.json").exists()

    monkeypatch.setattr(grpo_module, "collect_rollouts", real_collect)
    assert main(["train", str(recipe), "--resume"]) == 0
    assert [row["step"] for row in read_metrics(run / "metrics.jsonl")] == [1, 2, 3]
    assert json.loads((run / "summary.json").read_text())["grpo_steps"] == 3


def test_a_stop_during_the_weight_update_waits_until_the_step_is_recorded(small_config, tmp_path, monkeypatch):
    _signal_on_call(monkeypatch, grpo_module, "policy_update", 2, signal.SIGTERM)
    with pytest.raises(Interrupted):
        train(small_config("train.steps=4"), tmp_path / "run")
    assert latest_checkpoint(tmp_path / "run" / "checkpoints").name == "step-2"
    assert [row["step"] for row in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1, 2]


def test_signals_are_held_back_in_a_deferred_block_and_let_through_where_allowed():
    with stop_on_signals():
        with pytest.raises(Interrupted) as stop:
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                held = True  # still running: the request waits for the block's end
        assert held and exit_code(stop.value) == 143
        with pytest.raises(Interrupted), signals_deferred(), signals_allowed():
            os.kill(os.getpid(), signal.SIGINT)
            pytest.fail("a stop request inside signals_allowed() must raise at once")


# -- the run folder and the command line ------------------------------------------------------
def test_resume_flag_leaves_the_next_override_alone():
    args = build_parser().parse_args(["train", "--resume", "seed=7"])
    config = config_from_args("train", args.recipe, [*args.overrides, "log.run_name=x", "checkpoint.resume=latest"])
    assert args.resume is True and config.seed == 7
    args = build_parser().parse_args(["train", "--resume-from", "runs/x/checkpoints/step-5", "seed=7"])
    assert args.resume_from == "runs/x/checkpoints/step-5"


def test_resume_without_a_run_name_is_one_error_and_creates_nothing(tmp_path, capsys):
    assert main(["train", f"log.output_dir={tmp_path / 'runs'}", "--resume"]) != 0
    assert "log.run_name" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_used_run_folder_is_refused_without_resume(small_config):
    config = small_config("train.steps=1", "eval.before=false", "eval.after=false")
    run = Path(config.log.output_dir) / config.log.run_name
    config.save_yaml(run / "config.yaml")
    assert plan_resume(config, run).weights is None  # a start that failed before any output: reusable
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunFolderError, match=r"already holds a run .*--resume"):
        run_training(config)
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n' and sorted(os.listdir(run)) == ["config.yaml", "metrics.jsonl"]


def test_resume_refuses_config_changes_that_alter_the_run_unless_allowed(small_config, caplog):
    config = small_config("train.steps=4")
    run = Path(config.log.output_dir) / config.log.run_name
    config.save_yaml(run / "config.yaml")
    save_checkpoint(run / "checkpoints", TinySaver(), None, TrainerState(step=2))

    changed = small_config("train.steps=4", "algo.beta=0.04", "log.progress_bar=true", "checkpoint.resume=latest")
    with pytest.raises(RunFolderError, match=r"algo\.beta: 0\.0 -> 0\.04") as refused:
        run_training(changed)
    assert "log.progress_bar" not in str(refused.value)  # where it logs does not alter the run

    safe = small_config("train.steps=4", "log.progress_bar=true", "eval.limit=5", "checkpoint.resume=latest")
    assert plan_resume(safe, run).grpo == run / "checkpoints" / "step-2"
    assert "log.progress_bar: False -> True" in caplog.text
    forced = small_config("train.steps=4", "algo.beta=0.04", "checkpoint.resume=latest", "checkpoint.allow_config_changes=true")
    assert plan_resume(forced, run).grpo == run / "checkpoints" / "step-2"


@pytest.mark.parametrize("tuning", [(), ("lora.enabled=true", "lora.r=4")], ids=["full", "lora"])
def test_stops_in_sft_and_grpo_resume_to_the_uninterrupted_result(small_config, monkeypatch, tuning):
    """SFT then GRPO with a KL reference (the post-SFT policy): Ctrl-C in SFT step 3, SIGTERM in
    GRPO step 2, two resumes; every weight and logged step matches one uninterrupted run."""
    options = ("sft.enabled=true", "sft.steps=4", "sft.batch_size=4", "sft.micro_batch_size=4", "train.steps=3",
               "algo.beta=0.5", "eval.before=false", "eval.after=false", *tuning)
    full = small_config(*options, "log.run_name=full")
    run_training(full)

    half = small_config(*options, "log.run_name=half")
    run = Path(half.log.output_dir) / "half"
    _signal_on_call(monkeypatch, sft_module, "completion_token_ids", 3, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        run_training(half)
    assert latest_checkpoint(run / "sft" / "checkpoints").name == "step-2" and not (run / "sft" / "model").exists()
    monkeypatch.undo()
    _signal_on_call(monkeypatch, grpo_module, "collect_rollouts", 2, signal.SIGTERM)
    resumed = small_config(*options, "log.run_name=half", "checkpoint.resume=latest")
    with pytest.raises(KeyboardInterrupt) as stop:
        run_training(resumed)
    assert exit_code(stop.value) == 143
    assert latest_checkpoint(run / "checkpoints").name == "step-1" and not (run / "sft" / "checkpoints").exists()
    monkeypatch.undo()
    run_training(small_config(*options, "log.run_name=half", "checkpoint.resume=latest"))

    done = Path(full.log.output_dir) / "full"
    weights = "adapter_model.safetensors" if tuning else "model.safetensors"
    for folder in ("sft/model", "checkpoints/step-3"):
        expected, got = (load_file(str(root / folder / weights)) for root in (done, run))
        assert all(torch.equal(expected[name], got[name]) for name in expected), folder
    for log in ("sft/metrics.jsonl", "metrics.jsonl"):
        expected, got = read_metrics(done / log), read_metrics(run / log)
        assert [row["step"] for row in got] == [row["step"] for row in expected]
        keys = ("sft/loss",) if log.startswith("sft") else ("loss", "kl", "reward/total")
        for a, b in zip(expected, got):
            assert [a[k] for k in keys] == pytest.approx([b[k] for k in keys], rel=1e-6, abs=1e-7), (log, a["step"])
    assert read_metrics(done / "metrics.jsonl")[-1]["kl"] > 1e-4


@pytest.mark.parametrize("tuning", [(), ("lora.enabled=true", "lora.r=4", "lora.dropout=0")], ids=["full", "lora"])
def test_the_kl_reference_is_the_policy_after_sft(small_config, tuning):
    """GRPO starts from the SFT policy, so its first update (one per step) sees KL 0 exactly;
    a reference without the SFT (e.g. a LoRA base with every adapter off) would not."""
    config = small_config("sft.enabled=true", "sft.steps=3", "sft.batch_size=4", "sft.micro_batch_size=4",
                          "sft.lr=0.05", "train.steps=2", "algo.beta=0.5", "eval.before=false", "eval.after=false",
                          DENSE_REWARD, *tuning)
    run_training(config)
    first, second = read_metrics(Path(config.log.output_dir) / config.log.run_name / "metrics.jsonl")
    assert first["kl"] == pytest.approx(0.0, abs=1e-7) and second["kl"] > 1e-5
    if tuning:  # checkpoints hold the trained adapter only, not the frozen reference beside it
        assert not list((Path(config.log.output_dir) / config.log.run_name / "checkpoints").glob("*/reference"))


def _signal_on_call(monkeypatch, module, name: str, call: int, signum: int) -> None:  # noqa: ANN001
    """Make ``module.name`` send ``signum`` to this process on its ``call``-th call (then run as usual)."""
    real, calls = getattr(module, name), []

    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == call:
            os.kill(os.getpid(), signum)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
