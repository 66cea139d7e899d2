import pytest
import torch

from mmgrpo.trainer.optim import build_optimizer, build_scheduler, lr_multiplier


def test_schedules_by_hand():
    assert lr_multiplier(0, total_steps=10, warmup_steps=0, schedule="linear") == 1.0
    assert lr_multiplier(5, total_steps=10, warmup_steps=0, schedule="linear") == pytest.approx(0.5)
    assert lr_multiplier(5, total_steps=10, warmup_steps=0, schedule="cosine") == pytest.approx(0.5)
    assert lr_multiplier(9, total_steps=10, warmup_steps=0, schedule="constant") == 1.0
    assert lr_multiplier(0, total_steps=10, warmup_steps=3, schedule="constant") == pytest.approx(0.25)
    assert lr_multiplier(3, total_steps=10, warmup_steps=3, schedule="linear") == 1.0


def test_no_weight_decay_on_biases_and_scheduler_steps_lr():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    optimizer = build_optimizer(model, lr=0.1, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8)
    decays = sorted(group["weight_decay"] for group in optimizer.param_groups)
    assert decays == [0.0, 0.01] and len(optimizer.param_groups[1]["params"]) == 3
    scheduler = build_scheduler(optimizer, total_steps=4, warmup_ratio=0.0, schedule="linear")
    seen = []
    for _ in range(4):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([0.1, 0.075, 0.05, 0.025])
