"""train.precision=fp16: float16 autocast with dynamic loss scaling (skipped steps on overflow)."""

from __future__ import annotations

import math

import pytest
import torch

from mmgrpo.config import ConfigError
from mmgrpo.config.schema import TrainConfig
from mmgrpo.trainer.backends import build_backend
from mmgrpo.trainer.backends.base import OptimizerSpec
from mmgrpo.trainer.backends.deepspeed_config import implied_settings, merged_config
from mmgrpo.trainer.loss_scaling import LossScaler, autocast_dtype

from tests.training import DENSE_REWARD
from tests.e2e.test_training_paths import fresh_trainer

SPEC = OptimizerSpec(lr=0.1, weight_decay=0.0, total_steps=10)


def _backend(precision: str, **train: object):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    return build_backend(model, SPEC, TrainConfig(precision=precision, **train))


def _loss(model: torch.nn.Module, factor: float = 1.0) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(torch.ones(3, 4))
    return out.float().pow(2).mean() * factor


def test_an_overflowing_step_is_skipped_the_scale_halves_and_the_schedule_waits():
    backend = _backend("fp16", fp16_initial_scale=2.0**16)
    before = [p.detach().clone() for p in backend.model.parameters()]
    backend.backward(_loss(backend.model, factor=1e30))  # x 2^16: inf in float16
    norm = backend.step()
    assert not math.isfinite(norm)
    assert all(torch.equal(a, b) for a, b in zip(before, backend.model.parameters()))
    assert backend.scheduler.last_epoch == 0  # no optimizer step was taken
    assert backend.precision_metrics() == {"precision/loss_scale": 2.0**15, "precision/skipped_steps": 1.0}

    backend.backward(_loss(backend.model))
    assert math.isfinite(backend.step()) and backend.scheduler.last_epoch == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, backend.model.parameters()))
    assert backend.precision_metrics()["precision/skipped_steps"] == 1.0


def test_gradients_are_unscaled_before_clipping_and_stepping():
    """Same loss, same step with and without scaling: the scale must not leak into the update."""
    plain, scaled = _backend("fp32"), _backend("fp16", fp16_initial_scale=2.0**10)
    norms = []
    for backend in (plain, scaled):
        backend.backward(_loss(backend.model))
        norms.append(backend.step())
    assert norms[1] == pytest.approx(norms[0], rel=1e-3)
    for a, b in zip(plain.model.parameters(), scaled.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)
    assert plain.precision_metrics() == {}


def test_the_scale_grows_after_the_growth_interval_and_survives_a_checkpoint(tmp_path):
    backend = _backend("fp16", fp16_initial_scale=8.0, fp16_growth_interval=2)
    for _ in range(2):
        backend.backward(_loss(backend.model))
        backend.step()
    assert backend.precision_metrics()["precision/loss_scale"] == 16.0
    saved = backend.save_optimizer(tmp_path)
    restored = _backend("fp16")
    restored.load_optimizer(tmp_path, saved)
    assert restored.precision_metrics() == backend.precision_metrics()
    assert restored.optimizer.state_dict()["state"].keys() == backend.optimizer.state_dict()["state"].keys()


def test_scaling_is_off_outside_fp16():
    scaler = LossScaler("bf16", "cpu")
    loss = torch.tensor(2.0)
    assert scaler.scaled(loss) is loss and scaler.scale is None and scaler.state_dict() == {}
    assert autocast_dtype("fp16") == torch.float16 and autocast_dtype("fp32") is None


def test_deepspeed_gets_its_dynamic_fp16_scaler_settings():
    spec = OptimizerSpec(lr=1e-5, weight_decay=0.0, total_steps=10, samples_per_step=8)
    train = TrainConfig(micro_batch_size=4, precision="fp16", fp16_initial_scale=2.0**12, fp16_growth_interval=100)
    config = merged_config(implied_settings(train, spec, 2), {}, "user.json")
    assert config["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 100}
    assert config["bf16"] == {"enabled": False}


def test_deepspeed_fp16_is_refused_with_a_reason_where_its_accelerator_has_none():
    deepspeed = pytest.importorskip("deepspeed", reason="DeepSpeed is not installed: its fp16 refusal NOT tested")
    if deepspeed.get_accelerator().is_fp16_supported():
        pytest.skip("this DeepSpeed accelerator has fp16: tests/e2e/test_gpu_training.py runs ZeRO in fp16")
    with pytest.raises(ConfigError, match=r"DeepSpeed's cpu accelerator has no fp16 \(it supports float32, bfloat16\)"):
        _backend("fp16", backend="deepspeed")


def test_fp16_is_refused_with_fsdp2_and_its_keys_outside_fp16(small_config):
    with pytest.raises(ConfigError, match="fp16 is not supported with train.backend=fsdp2"):
        small_config("train.precision=fp16", "train.backend=fsdp2")
    with pytest.raises(ConfigError, match="train.fp16_initial_scale.*read only with train.precision=fp16"):
        small_config("train.fp16_initial_scale=1024")


def test_a_grpo_step_trains_in_fp16_and_logs_the_scale(small_config, tmp_path):
    trainer = fresh_trainer(small_config("train.precision=fp16", "algo.beta=0.04", DENSE_REWARD), tmp_path / "run")
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    metrics = trainer.step()
    assert metrics["precision/loss_scale"] == 2.0**16 and metrics["precision/skipped_steps"] == 0
    assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
    assert any(not torch.equal(before[name], p) for name, p in trainer.model.named_parameters())


def test_a_grpo_step_that_overflows_is_skipped_and_the_run_goes_on(small_config, tmp_path):
    config = small_config("train.precision=fp16", "train.fp16_initial_scale=1.2676506002282294e+30", DENSE_REWARD)
    trainer = fresh_trainer(config, tmp_path / "run")
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    metrics = trainer.step()
    assert metrics["precision/skipped_steps"] == 1 and metrics["precision/loss_scale"] == 2.0**99
    assert all(torch.equal(before[name], p) for name, p in trainer.model.named_parameters())
