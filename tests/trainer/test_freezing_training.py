"""Training with a frozen media tower: the tower stays bit-identical while the language model moves, the
optimizer holds no state for it, and a frozen run checkpoints and resumes."""

from __future__ import annotations

import json
import os

import pytest
import torch

from mmgrpo.config.schema import ModelConfig, TrainConfig
from mmgrpo.models.adapters import adapter_for
from mmgrpo.models.freezing import frozen_parts
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.backends import OptimizerSpec, SingleProcessBackend
from mmgrpo.trainer.checkpoint import latest_checkpoint

from tests.e2e.ranks import EXTENSIONS_CACHE, NEEDS_DEEPSPEED
from tests.torchrun import torchrun
from tests.trainer import backend_parity, reference_sharing_worker
from tests.trainer.test_grpo_trainer import train
from tests.training import DENSE_REWARD, interrupt_step

FAMILIES = (
    "qwen2_5_vl", "qwen3_vl", "qwen3_5", "smolvlm", "internvl", "gemma3", "glm4v", "llava_onevision", "qwen2_audio",
    "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker",
)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_frozen_tower_stays_bit_identical_while_the_language_model_moves(family, tiny_model_dir):
    model_dir = tiny_model_dir(family)
    options = ModelConfig(freeze_vision_tower=True)
    weights, metrics = backend_parity.train_on_fixed_rollouts(
        model_dir, TrainConfig(micro_batch_size=backend_parity.MICRO_BATCH), options=options
    )
    initial = backend_parity.initial_weights(model_dir)
    model, _ = load_model_and_processor(str(model_dir))
    tower = frozen_parts(model, options).names
    projector = {name for name in initial if name.startswith(adapter_for(model).projector_prefixes)}
    assert tower and all(torch.equal(weights[name], initial[name]) for name in tower)
    moved = {name for name in initial if not torch.equal(weights[name], initial[name])}
    assert any(".layers.1." in name for name in moved)  # the language model trains
    assert moved & projector  # the projector is not part of the tower: it trains
    assert metrics["frozen_optimizer_states"] == 0
    assert 0 < metrics["optimizer_states"] <= len({name for name, _ in model.named_parameters()} - tower)


def test_trainable_patterns_train_only_their_matches_and_a_frozen_run_resumes(small_config, tmp_path, monkeypatch):
    """Full fine-tuning with a KL reference and only the language model's last layer trainable; the run stopped
    after step 1 resumes to the uninterrupted run's weights, the frozen parts still as loaded."""
    config = small_config("train.steps=2", "algo.beta=0.1", DENSE_REWARD, "model.freeze_vision_tower=true",
                          "model.trainable=[model.language_model.layers.1.*, model.visual.merger.*]")
    full = train(config, tmp_path / "full")
    initial, _ = load_model_and_processor(config.model.name_or_path)
    before = dict(initial.named_parameters())
    trained = {"model.language_model.layers.1.", "model.visual.merger."}
    for name, parameter in full.model.named_parameters():
        changed = not torch.equal(parameter, before[name])
        assert parameter.requires_grad == name.startswith(tuple(trained)), name
        assert not changed or parameter.requires_grad, f"{name} is frozen but changed"
    assert any(not torch.equal(p, before[n]) for n, p in full.model.named_parameters() if p.requires_grad)
    trainable_ids = {id(p) for p in full.model.parameters() if p.requires_grad}
    assert set(map(id, full.optimizer.state)) <= trainable_ids and full.optimizer.state
    assert_reference_shares_only_the_frozen_parts(full, before)

    restore_step = interrupt_step(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        train(config, tmp_path / "half")
    assert latest_checkpoint(tmp_path / "half" / "checkpoints").name == "step-1"
    restore_step()
    resumed = train(config, tmp_path / "half", resume=True)
    assert [row["step"] for row in read_metrics(tmp_path / "half" / "metrics.jsonl")] == [1, 2]
    for (name, p), (_, q) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.allclose(p, q, atol=1e-6), name
    assert_reference_shares_only_the_frozen_parts(resumed, before)


def assert_reference_shares_only_the_frozen_parts(trainer, initial: dict[str, torch.Tensor]) -> None:
    """The KL reference uses the policy's frozen tensors themselves, and is the initial policy everywhere."""
    policy = dict(trainer.model.named_parameters())
    for name, parameter in trainer.reference.module.named_parameters():
        assert (parameter is policy[name]) == (not policy[name].requires_grad), name
        assert torch.equal(parameter, initial[name]), name


def test_weight_pushes_after_the_first_leave_frozen_tensors_out(tiny_qwen25vl):
    model, _ = load_model_and_processor(str(tiny_qwen25vl))
    frozen = frozen_parts(model, ModelConfig(freeze_vision_tower=True)).names
    backend = SingleProcessBackend(model, OptimizerSpec(lr=1e-3, weight_decay=0.0, total_steps=1))
    everything = dict(backend.whole_weights())
    pushed = dict(backend.whole_weights(frozen))
    assert frozen <= everything.keys() and pushed.keys() == everything.keys() - frozen


@pytest.mark.distributed
@NEEDS_DEEPSPEED
def test_under_zero2_the_reference_uses_the_policys_frozen_tower(tiny_qwen25vl, tmp_path):
    """ZeRO-2 keeps whole weights on every rank, so the reference shares the frozen tower as on one process (in
    bf16 too, where DeepSpeed casts the policy and the back end the reference)."""
    out = tmp_path / "shared.json"
    env = {"DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_CACHE))}
    done = torchrun(2, [reference_sharing_worker.__file__, "--model-dir", str(tiny_qwen25vl), "--out", str(out)], env=env)
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    for precision, result in json.loads(out.read_text()).items():
        assert result["frozen"] and result["shared"] == result["frozen"], precision
        assert all(name.startswith("model.visual.") for name in result["frozen"]), precision
        assert result["dtypes"] == ["torch.bfloat16" if precision == "bf16" else "torch.float32"], precision
