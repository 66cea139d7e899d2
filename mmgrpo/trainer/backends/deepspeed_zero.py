"""DeepSpeed ZeRO stage 2 or 3 over the ranks torchrun (or any launcher setting RANK/WORLD_SIZE) starts.

ZeRO-2 shards optimizer state and gradients, ZeRO-3 also the weights (gathered per
module in forward, which the group-shared path's direct submodule calls trigger too).
DeepSpeed averages gradients over ranks; the trainer's losses are shares of a summed
global loss, so :meth:`DeepSpeedBackend.backward` scales by the world size.
On a CPU-only machine set ``DS_ACCELERATOR=cpu`` (gloo) and ``TORCH_EXTENSIONS_DIR`` to a
cache folder: DeepSpeed compiles its CPU ops the first time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from mmgrpo.config.errors import ConfigError
from mmgrpo.trainer.backends.base import (
    BACKENDS, OptimizerSpec, ReduceOp, one_process_group_unless_launched, reduce_across_ranks,
)
from mmgrpo.trainer.backends.deepspeed_config import implied_settings, merged_config, read_user_config
from mmgrpo.trainer.optim import parameter_groups

if TYPE_CHECKING:
    from mmgrpo.config.schema import TrainConfig


@BACKENDS.register("deepspeed")
class DeepSpeedBackend:
    """``model`` wrapped in a DeepSpeed engine with ZeRO as ``train`` says."""

    def __init__(self, model: torch.nn.Module, spec: OptimizerSpec, train: TrainConfig) -> None:
        deepspeed = _import_deepspeed()
        one_process_group_unless_launched()
        deepspeed.init_distributed()  # a no-op when the process group exists
        self.rank, self.world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        self.config = merged_config(
            implied_settings(train, spec, self.world_size), read_user_config(train.deepspeed_config),
            train.deepspeed_config or "the DeepSpeed config",
        )
        if train.offload_optimizer:  # DeepSpeed builds its CPU Adam from config["optimizer"]
            optimizer: dict[str, Any] = {"model_parameters": parameter_groups(model, spec.weight_decay)}
        else:
            optimizer = {"optimizer": spec.optimizer_for(model)}
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model,
            **optimizer,
            lr_scheduler=spec.scheduler_for,
            config=self.config,
        )
        self.model: torch.nn.Module = self.engine.module
        self.zero_stage = train.zero_stage

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0

    def backward(self, loss: torch.Tensor) -> None:
        # The trainer calls the policy's submodules, never engine.forward, which is where DeepSpeed
        # starts a micro-step: without this, ZeRO-3 overwrites the earlier micro-batches' gradients.
        self.engine.optimizer.clear_backward_seen_flag()
        # DeepSpeed averages over ranks; the ranks' losses add up to the global one.
        self.engine.backward(loss * self.world_size, scale_wrt_gas=False)

    def step(self) -> float:
        self.engine.step()
        return float(self.engine.get_global_grad_norm())

    def zero_grad(self) -> None:
        self.engine.zero_grad()

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        if self.zero_stage == 3:  # gathered one module at a time onto rank 0 (every rank takes part)
            return dict(self.engine._zero3_consolidated_16bit_state_dict() or {})
        if not self.is_main_process:
            return {}
        return {name: tensor.detach().cpu() for name, tensor in self.model.state_dict().items()}

    def all_reduce(self, values: Mapping[str, float], op: ReduceOp = "sum") -> dict[str, float]:
        return reduce_across_ranks(values, op, self.engine.device)


def _import_deepspeed() -> Any:
    try:
        import deepspeed
    except ImportError as missing:
        raise ConfigError(
            f"train.backend=deepspeed needs DeepSpeed ({missing}): pip install 'mmgrpo[deepspeed]'"
        ) from None
    return deepspeed
