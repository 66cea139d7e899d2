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
- reduces numbers across ranks with ``backend.ranks.all_reduce`` (and exchanges small Python objects
  with ``ranks.gather`` / ``ranks.broadcast_object``, agrees with ``ranks.all_ranks``);
- saves and restores the optimizer through ``save_optimizer`` / ``load_optimizer``, which a
  checkpoint calls on every rank.

``shards_weights`` says whether a forward pass is itself collective (ZeRO-3, FSDP2 gather each
module's weights from all ranks): then every rank must run the same forward passes, so the
rollout engine decodes until all ranks are done and the trainer gives every rank equally many groups.

Back ends are registered by name in :data:`BACKENDS` and built as
``BACKENDS.get(name)(model, spec, train)``; :func:`mmgrpo.trainer.backends.build_backend`
does that for a config.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from mmgrpo.config.backend_traits import BackendTraits
from mmgrpo.distributed import Ranks
from mmgrpo.models.logprobs import Lockstep
from mmgrpo.registry import Registry
from mmgrpo.trainer.optim import Schedule, build_optimizer, build_scheduler

if TYPE_CHECKING:
    from mmgrpo.config.schema import TrainConfig

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
    ranks: Ranks
    """This process among the ranks, and their collectives."""
    traits: BackendTraits
    """What it reads of ``train`` and supports (``mmgrpo.config.backend_traits``, checked before it is built)."""
    shards_weights: bool
    """True when forward passes gather weights from every rank (all ranks must run the same ones)."""

    def backward(self, loss: torch.Tensor) -> None:
        """Add the gradient of ``loss`` (this rank's share of a summed global loss) to the gradients."""
        ...

    def step(self) -> float:
        """Clip, step the optimizer and the schedule, zero the gradients; return the norm before clipping.
        A non-finite norm (outside fp16 loss scaling, which skips such steps) raises
        :class:`~mmgrpo.trainer.nonfinite.NonFiniteTrainingError`, before the update where the back end can."""
        ...

    def zero_grad(self) -> None:
        """Drop accumulated gradients without stepping (e.g. before an emergency checkpoint)."""
        ...

    def precision_metrics(self) -> dict[str, float]:
        """Under fp16: the loss scale and the optimizer steps skipped on overflow so far; {} otherwise."""
        ...

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on the main process (gathered from shards); ``{}`` on other ranks."""
        ...

    def whole_weights(self, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's state dict on every rank, one whole tensor at a time (LoRA merged), less the names
        in ``skip`` (frozen ones, never gathered): what a rank's rollout worker copies. Gathering a sharded
        tensor is a collective, so every rank consumes all of it, in order (with the same ``skip``); a
        tensor may be freed once the next is drawn: copy it."""
        ...

    def prepare_frozen(self, module: torch.nn.Module) -> torch.nn.Module:
        """``module`` (e.g. the KL reference, never trained) sharded as the policy's weights are,
        so that no rank holds all of it when the policy's are sharded; the module to call."""
        ...

    def save_optimizer(self, folder: Path) -> dict[str, Any] | None:
        """Called on every rank while a checkpoint is written into ``folder``: returns the optimizer
        state the checkpoint's trainer state records (on the main process), or writes this rank's
        shard files into ``folder`` itself and returns None."""
        ...

    def load_optimizer(self, folder: Path, recorded: dict[str, Any] | None) -> None:
        """Called on every rank on resume: restore what :meth:`save_optimizer` saved."""
        ...

    def release(self) -> None:
        """Free what the back end holds beyond the module (its optimizer state, its hooks' buffers) once its phase is
        over (SFT before GRPO's own back end); the module, which it changed, is not used again."""
        ...


BackendFactory = type[TrainingBackend]
BACKENDS: Registry[BackendFactory] = Registry("training back end")


def forward_lockstep(backend: TrainingBackend) -> Lockstep | None:
    """How a forward through ``backend.model`` agrees with the other ranks' where forwards are collectives (one
    small all-reduce per forward); None where each rank's forwards are its own."""
    return partial(backend.ranks.all_reduce, op="max") if backend.shards_weights else None


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def build_backend(
    model: torch.nn.Module, spec: OptimizerSpec, train: TrainConfig
) -> TrainingBackend:
    """The back end ``train.backend`` names, prepared around ``model``."""
    return BACKENDS.get(train.backend)(model, spec, train)
