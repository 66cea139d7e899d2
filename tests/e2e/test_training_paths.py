"""Training options that change how a step runs: periodic eval, bfloat16 weights, gradient checkpointing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.pipeline import RunPaths, run_training

from tests.training import DENSE_REWARD, build_trainer_inputs


def test_eval_every_n_steps_runs_at_those_steps_only(small_config):
    config = small_config(
        "train.steps=5", "eval.every_n_steps=2", "eval.before=false", "eval.after=false", "eval.limit=4",
    )
    run_training(config)
    root = RunPaths.for_config(config).root
    rows = {row["step"]: row for row in read_metrics(root / "metrics.jsonl")}
    assert sorted(rows) == [1, 2, 3, 4, 5]
    assert [step for step, row in rows.items() if "eval/accuracy" in row] == [2, 4]
    assert sorted(p.name for p in (root / "eval").iterdir()) == ["step-2", "step-4"]
    for step in (2, 4):
        results = json.loads((root / "eval" / f"step-{step}" / "results.json").read_text())
        [entry] = results["models"].values()
        assert entry["summary"]["n"] == 4 == rows[step]["eval/n"]
        assert rows[step]["eval/accuracy"] == entry["summary"]["accuracy"]


def fresh_trainer(config, run_dir: Path) -> GRPOTrainer:
    """A trainer as ``run_training`` builds it for a fresh run (seeded, the loaded model as KL reference)."""
    model, processor, train_set = build_trainer_inputs(config, run_dir)
    torch.manual_seed(config.seed)
    return GRPOTrainer(config, run_dir, model, processor, train_set, reference_source=config.model.name_or_path)


def test_bfloat16_weights_train(small_config, tmp_path):
    config = small_config("model.dtype=bfloat16", "algo.beta=0.04", DENSE_REWARD)
    trainer = fresh_trainer(config, tmp_path / "run")
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    metrics = trainer.step()
    assert {p.dtype for p in trainer.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in trainer.reference.module.parameters()} == {torch.bfloat16}
    for key in ("loss", "grad_norm", "kl", "entropy"):
        assert math.isfinite(metrics[key]), key
    assert metrics["grad_norm"] > 0
    moved = [name for name, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert moved, "no bfloat16 parameter changed in the step"


def _inside_checkpointed_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Submodules of the layers transformers may run under activation checkpointing (those with a
    ``gradient_checkpointing`` attribute). The layers' own hooks stay outside the checkpoint;
    their submodules run again when backward recomputes the layer."""
    layers = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    return [inner for layer in layers for inner in layer.modules() if inner is not layer]


def _step_with_probes(config, run_dir: Path) -> tuple[dict[str, float], dict[str, torch.Tensor], int]:
    """One step; returns its metrics, the gradients the optimizer stepped with, and the number
    of calls, in train mode (the update), of the modules inside checkpointable layers, counted
    on entry (a recomputation in backward may stop early)."""
    trainer = fresh_trainer(config, run_dir)
    calls = 0

    def count(module: torch.nn.Module, _args) -> None:
        nonlocal calls
        calls += module.training

    inner = _inside_checkpointed_layers(trainer.model)
    assert inner, "the tiny model has no checkpointable layers"
    for module in inner:
        module.register_forward_pre_hook(count)
    gradients: dict[str, torch.Tensor] = {}
    names = {id(p): name for name, p in trainer.model.named_parameters()}

    def snapshot(optimizer: torch.optim.Optimizer, *_) -> None:
        params = (p for group in optimizer.param_groups for p in group["params"] if p.grad is not None)
        gradients.update({names[id(p)]: p.grad.clone() for p in params})

    trainer.optimizer.register_step_pre_hook(snapshot)
    assert any(getattr(m, "gradient_checkpointing", False) for m in trainer.model.modules()) == (
        config.train.gradient_checkpointing
    )
    return trainer.step(), gradients, calls


@pytest.mark.parametrize("shared", [False, True], ids=["plain", "group-shared"])
def test_gradient_checkpointing_recomputes_and_matches_plain_step(small_config, tmp_path, shared):
    options = (f"train.group_shared_encoding={str(shared).lower()}", "algo.beta=0.04")
    plain, plain_grads, plain_calls = _step_with_probes(small_config(*options), tmp_path / "plain")
    ckpt, ckpt_grads, ckpt_calls = _step_with_probes(
        small_config(*options, "train.gradient_checkpointing=true"), tmp_path / "ckpt"
    )
    assert 0 < plain_calls < ckpt_calls <= 2 * plain_calls  # layers ran again in backward
    for key in ("reward/total", "loss", "grad_norm", "kl", "entropy"):
        assert ckpt[key] == pytest.approx(plain[key], rel=1e-5, abs=1e-7), key
    assert plain_grads and plain_grads.keys() == ckpt_grads.keys()
    for name, grad in plain_grads.items():
        assert torch.allclose(ckpt_grads[name], grad, rtol=1e-4, atol=1e-7), name


def test_gradient_checkpointing_with_group_shared_encoding_trains(small_config):
    """A 2-step run with both on: the first update moves the policy away from its KL reference."""
    config = small_config(
        "train.steps=2", "train.gradient_checkpointing=true", "train.group_shared_encoding=true", "algo.beta=0.04",
        DENSE_REWARD,
    )
    run_training(config)
    rows = read_metrics(RunPaths.for_config(config).root / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert all(math.isfinite(row[key]) for key in ("loss", "grad_norm", "kl")), row
        assert row["grad_norm"] > 0
    assert abs(rows[0]["kl"]) < 1e-6 < rows[1]["kl"]
