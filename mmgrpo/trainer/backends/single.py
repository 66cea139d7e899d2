"""One process: plain PyTorch autograd, AdamW and ``clip_grad_norm_`` on the module as it is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from mmgrpo.config.schema import TrainConfig
from mmgrpo.models.embedding_grads import use_sparse_lookup_gradients
from mmgrpo.models.policy_weights import streamed_plain_weights
from mmgrpo.config.backend_traits import BACKEND_TRAITS
from mmgrpo.distributed import Ranks
from mmgrpo.trainer.backends.base import BACKENDS, OptimizerSpec, trainable_parameters
from mmgrpo.trainer.nonfinite import require_finite
from mmgrpo.trainer.loss_scaling import LossScaler

LOSS_SCALER_KEY = "loss_scaler"  # beside the optimizer's own state in the trainer state


@BACKENDS.register("single")
class SingleProcessBackend:
    """The whole model, its gradients and its optimizer state in this process (rank 0 of 1)."""

    ranks = Ranks()
    traits = BACKEND_TRAITS["single"]
    shards_weights = False

    def __init__(self, model: torch.nn.Module, spec: OptimizerSpec, train: TrainConfig | None = None) -> None:
        self.model, self.spec = model, spec
        use_sparse_lookup_gradients(model)
        self.optimizer, self.scheduler = spec.build(model)
        train = train or TrainConfig()  # SFT and tests pass none: fp32, no scaling
        self.loss_scaler = LossScaler(
            train.precision, next(model.parameters()).device.type,
            initial_scale=train.fp16_initial_scale, growth_interval=train.fp16_growth_interval,
        )

    def backward(self, loss: torch.Tensor) -> None:
        self.loss_scaler.scaled(loss).backward()

    def step(self) -> float:
        """Under fp16 a step whose gradients overflowed is skipped: no optimizer or schedule step.
        Otherwise a non-finite gradient norm raises :class:`NonFiniteTrainingError` before any update."""
        self.loss_scaler.unscale(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable_parameters(self.model), self.spec.max_grad_norm)
        if not self.loss_scaler.enabled:
            require_finite("gradient norm", float(grad_norm))
        if self.loss_scaler.step(self.optimizer):
            self.scheduler.step()
        self.zero_grad()
        return float(grad_norm)

    def precision_metrics(self) -> dict[str, float]:
        return self.loss_scaler.metrics()

    def release(self) -> None:
        self.optimizer.state.clear()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())

    def whole_weights(self, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, torch.Tensor]]:
        yield from streamed_plain_weights(self.model, skip=skip)

    def prepare_frozen(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def save_optimizer(self, folder: Path) -> dict[str, Any]:
        state = self.optimizer.state_dict()
        return {**state, LOSS_SCALER_KEY: self.loss_scaler.state_dict()} if self.loss_scaler.enabled else state

    def load_optimizer(self, folder: Path, recorded: dict[str, Any] | None) -> None:
        recorded = dict(recorded)
        self.loss_scaler.load_state_dict(recorded.pop(LOSS_SCALER_KEY, {}))
        self.optimizer.load_state_dict(recorded)
