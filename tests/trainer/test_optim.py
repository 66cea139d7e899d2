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


def test_adamw_runs_the_fused_kernel_on_cpu_and_steps_as_the_reference_loop():
    """The fused kernel (one pass per tensor) where the device has one; the same update as PyTorch's plain loop."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
    reference.load_state_dict(model.state_dict())
    optimizer = build_optimizer(model, lr=1e-2, weight_decay=0.1)
    assert optimizer.defaults["fused"] is True
    loop = torch.optim.AdamW(
        [{"params": [reference[0].weight], "weight_decay": 0.1},
         {"params": [reference[0].bias, *reference[1].parameters()], "weight_decay": 0.0}],
        lr=1e-2, foreach=False,
    )
    for _ in range(3):
        for net, opt in ((model, optimizer), (reference, loop)):
            opt.zero_grad()
            net(torch.ones(2, 8)).square().sum().backward()
            opt.step()
    for fused, plain in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(fused, plain, atol=1e-6, rtol=1e-5)
