"""Training options that change how a step runs: periodic eval, bfloat16 weights, gradient checkpointing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.trainer.metrics import read_metrics
from mmgrpo.trainer.pipeline import RunPaths, run_training

from .conftest import build_trainer_inputs


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
    config = small_config("model.dtype=bfloat16", "algo.beta=0.04")
    model, _, _ = build_trainer_inputs(config, tmp_path / "loaded")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = fresh_trainer(config, tmp_path / "run")
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


def _step_counting_training_forwards(config, run_dir: Path) -> tuple[GRPOTrainer, dict[str, float], int]:
    """One step; also the number of calls, in train mode (the update), of the modules inside
    checkpointable layers, counted on entry (a recomputation may stop early)."""
    trainer = fresh_trainer(config, run_dir)
    calls = 0

    def count(module: torch.nn.Module, _args) -> None:
        nonlocal calls
        calls += module.training

    inner = _inside_checkpointed_layers(trainer.model)
    assert inner, "the tiny model has no checkpointable layers"
    handles = [module.register_forward_pre_hook(count) for module in inner]
    metrics = trainer.step()
    for handle in handles:
        handle.remove()
    return trainer, metrics, calls


def test_gradient_checkpointing_recomputes_and_matches_plain_step(small_config, tmp_path):
    options = ("train.group_shared_encoding=false", "algo.beta=0.04", "train.lr=0.001")
    plain, plain_metrics, plain_calls = _step_counting_training_forwards(small_config(*options), tmp_path / "plain")
    checkpointed, ckpt_metrics, ckpt_calls = _step_counting_training_forwards(
        small_config(*options, "train.gradient_checkpointing=true"), tmp_path / "ckpt"
    )
    assert checkpointed.model.is_gradient_checkpointing and not plain.model.is_gradient_checkpointing
    assert 0 < plain_calls < ckpt_calls <= 2 * plain_calls  # layers ran again in backward
    for key in ("reward/total", "loss", "grad_norm", "kl", "entropy"):
        assert ckpt_metrics[key] == pytest.approx(plain_metrics[key], rel=1e-5, abs=1e-7), key
    for (name, p), (_, q) in zip(plain.model.named_parameters(), checkpointed.model.named_parameters()):
        assert torch.allclose(p, q, atol=1e-6), name
