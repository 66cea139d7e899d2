"""The training back-end interface: what differs between one process, DeepSpeed ZeRO and FSDP2.

The trainer owns the math (losses, micro-batches, their weights); a back end owns where
the weights, gradients and optimizer state live. The trainer only ever:

- runs forward passes on ``backend.model`` (the policy with the back end's hooks attached;
  its submodules may be called directly, as group-shared encoding does);
- calls ``backend.backward(loss)`` once per micro-batch, where ``loss`` is this rank's
  share of a global loss that is the SUM of every rank's shares, so the gradients equal
  those of one process holding the whole batch;
- calls ``backend.step()`` once per mini-batch: clip to the configured max norm, optimizer
  and learning-rate steps, zero the gradients; it returns the gradient norm before clipping;
- reduces numbers across ranks with ``backend.all_reduce``.

Back ends are registered by name in :data:`BACKENDS` and built as
``BACKENDS.get(name)(model, spec, train)``; :func:`mmgrpo.trainer.backends.build_backend`
does that for a config.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import torch

from mmgrpo.registry import Registry
from mmgrpo.trainer.optim import Schedule, build_optimizer, build_scheduler

if TYPE_CHECKING:
    from mmgrpo.config.schema import TrainConfig

ReduceOp = Literal["sum", "mean", "max", "min"]


@dataclass(frozen=True)
class OptimizerSpec:
    """AdamW, its learning-rate schedule and gradient clipping, as a phase (GRPO, SFT) configures them."""

    lr: float
    weight_decay: float
    total_steps: int  # optimizer steps the schedule spans
    schedule: Schedule = "constant"
    warmup_ratio: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)  # PyTorch's defaults
    eps: float = 1e-8
    max_grad_norm: float = 1.0
    samples_per_step: int = 1  # completions (examples) per optimizer step, all ranks together

    def build(
        self, model: torch.nn.Module
    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        """AdamW over ``model``'s trainable parameters and its scheduler."""
        optimizer = self.optimizer_for(model)
        return optimizer, self.scheduler_for(optimizer)

    def optimizer_for(self, model: torch.nn.Module) -> torch.optim.AdamW:
        return build_optimizer(model, lr=self.lr, weight_decay=self.weight_decay, betas=self.betas, eps=self.eps)

    def scheduler_for(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        return build_scheduler(
            optimizer, total_steps=self.total_steps, warmup_ratio=self.warmup_ratio, schedule=self.schedule
        )


@runtime_checkable
class TrainingBackend(Protocol):
    """Prepared policy + optimizer + schedule, and the collective operations a step needs."""

    model: torch.nn.Module
    """The module forward passes run on (the back end's hooks attached)."""
    optimizer: torch.optim.Optimizer
    """The optimizer as the back end wraps it; ``state_dict()`` is this rank's state."""
    scheduler: torch.optim.lr_scheduler.LRScheduler
    """The learning-rate schedule; ``last_epoch`` counts optimizer steps taken."""
    rank: int
    world_size: int

    @property
    def is_main_process(self) -> bool:
        """True on the rank that writes files (rank 0)."""
        ...

    def backward(self, loss: torch.Tensor) -> None:
        """Add the gradient of ``loss`` (this rank's share of a summed global loss) to the gradients."""
        ...

    def step(self) -> float:
        """Clip, step the optimizer and the schedule, zero the gradients; return the norm before clipping."""
        ...

    def zero_grad(self) -> None:
        """Drop accumulated gradients without stepping (e.g. before an emergency checkpoint)."""
        ...

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on the main process (gathered from shards); ``{}`` on other ranks."""
        ...

    def all_reduce(self, values: Mapping[str, float], op: ReduceOp = "sum") -> dict[str, float]:
        """``values`` reduced over all ranks with ``op`` (every rank gets the result)."""
        ...


BackendFactory = type[TrainingBackend]
BACKENDS: Registry[BackendFactory] = Registry("training back end")


def reduce_across_ranks(
    values: Mapping[str, float], op: ReduceOp, device: torch.device
) -> dict[str, float]:
    """``values`` reduced over the default process group, in one collective on ``device`` (the
    communication back end's: CPU for gloo, the GPU for NCCL). Every rank must pass the same keys."""
    names = sorted(values)
    if not names:
        return {}
    packed = torch.tensor([float(values[name]) for name in names], dtype=torch.float64, device=device)  # [K]
    torch_op = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}[op]
    torch.distributed.all_reduce(packed, op=getattr(torch.distributed.ReduceOp, torch_op))
    if op == "mean":
        packed /= torch.distributed.get_world_size()
    return dict(zip(names, packed.tolist()))


def one_process_group_unless_launched() -> None:
    """Started without a launcher (plain ``python``): set what torchrun would for a group of one."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    one = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for name, value in one.items():
        os.environ.setdefault(name, value)


def init_process_group() -> None:
    """The default process group, unless one exists: NCCL where CUDA is, else gloo."""
    if torch.distributed.is_initialized():
        return
    one_process_group_unless_launched()
    torch.distributed.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def build_backend(
    model: torch.nn.Module, spec: OptimizerSpec, train: TrainConfig
) -> TrainingBackend:
    """The back end ``train.backend`` names, prepared around ``model``."""
    return BACKENDS.get(train.backend)(model, spec, train)
