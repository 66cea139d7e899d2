"""PyTorch FSDP2 (``fully_shard``): weights, gradients and optimizer state sharded over the ranks.

Sharding units are the model's transformer blocks (Hugging Face's ``_no_split_modules``:
decoder layers, vision blocks), then every other module that owns parameters directly
(embeddings, norms, the output head, the vision merger). Each unit gathers its weights
in its own forward hook, so the trainer may call any submodule directly (group-shared
encoding calls the backbone and the output head, never the model's own forward).
FSDP2 averages gradients over ranks; the trainer's losses are shares of a summed global
loss, so :meth:`FSDP2Backend.backward` scales by the world size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict,
)
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from mmgrpo.config.errors import ConfigError
from mmgrpo.distributed import init_process_group
from mmgrpo.models.policy_weights import WholeTensor, streamed_plain_weights
from mmgrpo.config.backend_traits import BACKEND_TRAITS
from mmgrpo.distributed import Ranks
from mmgrpo.inputs import pick_device
from mmgrpo.trainer.backends.base import BACKENDS, OptimizerSpec, trainable_parameters
from mmgrpo.trainer.backends.sharded_loading import broadcast_buffers
from mmgrpo.trainer.nonfinite import require_finite

if TYPE_CHECKING:
    from mmgrpo.config.schema import TrainConfig


@BACKENDS.register("fsdp2")
class FSDP2Backend:
    """``model`` sharded with ``fully_shard`` per block and per remaining parameter owner.

    Checkpoints record the whole optimizer state (gathered onto the main process, keyed by
    parameter name), so a run resumes on any number of ranks.
    """

    traits = BACKEND_TRAITS["fsdp2"]
    shards_weights = True

    def __init__(self, model: torch.nn.Module, spec: OptimizerSpec, train: TrainConfig) -> None:
        init_process_group(train.collective_timeout_s)
        self.spec, self.device = spec, pick_device(train.device)
        self.ranks = Ranks.of_process_group(self.device)
        # bf16: compute in bf16 copies of the fp32 shards, reduce gradients in fp32.
        precision = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16 if train.precision == "bf16" else None, reduce_dtype=torch.float32
        )
        # Offload keeps shards, gradients and optimizer state in CPU memory (pinned only where a GPU is).
        offload = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if train.offload_optimizer else OffloadPolicy()
        self.sharding = {"mp_policy": precision, "offload_policy": offload}
        self.model = self.prepare_frozen(model)
        self.optimizer, self.scheduler = spec.build(model)

    def prepare_frozen(self, module: torch.nn.Module) -> torch.nn.Module:
        """Each unit is moved to the device whole and sharded there, one after another, so a module
        still on the CPU never has all its weights on the device; buffers outside the units follow.

        Sharded loading: where ``module`` is on the meta device on some rank (made there without weights,
        :func:`~mmgrpo.trainer.setup.loading_device`), the main process holds the only whole copy, in CPU memory:
        every rank shards its (empty) module, makes its shards on the device, and receives them from the main
        process one tensor at a time; no other rank ever holds a whole copy."""
        scattered = any(self.ranks.gather(any(parameter.is_meta for parameter in module.parameters())))
        whole = _WholeCopy.of(module) if scattered and self.ranks.is_main_process else None
        for unit in sharding_units(module):
            fully_shard(unit, **self.sharding)
        if not scattered:
            return module.to(self.device)
        module.to_empty(device=self.device)
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(module, whole.weights if whole is not None else {}, options=options)
        broadcast_buffers(module, self.device, whole.buffers if whole is not None else None)
        return module

    def backward(self, loss: torch.Tensor) -> None:
        (loss * self.ranks.world_size).backward()  # FSDP2 averages over ranks; the ranks' losses add up

    def step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(trainable_parameters(self.model), self.spec.max_grad_norm)
        grad_norm = require_finite("gradient norm", float(norm.full_tensor() if isinstance(norm, DTensor) else norm))
        self.optimizer.step()
        self.scheduler.step()
        self.zero_grad()
        return grad_norm

    def release(self) -> None:
        self.optimizer.state.clear()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def precision_metrics(self) -> dict[str, float]:
        return {}  # fp16 is refused with fsdp2 (mmgrpo.config.validation)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        self._reshard()
        state = get_model_state_dict(self.model, options=_GATHERED)
        return dict(state) if self.ranks.is_main_process else {}

    def whole_weights(self, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, torch.Tensor]]:
        self._reshard()
        yield from streamed_plain_weights(self.model, _read_whole, skip)

    def save_optimizer(self, folder: Path) -> dict[str, Any] | None:
        self._reshard()
        state = get_optimizer_state_dict(self.model, self.optimizer, options=_GATHERED)
        return dict(state) if self.ranks.is_main_process else None

    def load_optimizer(self, folder: Path, recorded: dict[str, Any] | None) -> None:
        """Every rank reads the whole recorded state and keeps its own shard of it."""
        options = StateDictOptions(full_state_dict=True)
        self._reshard()
        set_optimizer_state_dict(self.model, self.optimizer, optim_state_dict=recorded, options=options)

    def _reshard(self) -> None:
        """Back to the sharded parameters the optimizer holds: a forward pass without backward
        (rollout, evaluation) leaves the outermost units' weights gathered."""
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()


@dataclass(frozen=True)
class _WholeCopy:
    """The main process's whole module before sharding: its state dict (the loaded tensors, kept alive) and a copy
    of every buffer (``to_empty`` clears them)."""

    weights: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]

    @classmethod
    def of(cls, module: torch.nn.Module) -> _WholeCopy:
        buffers = module.named_buffers(remove_duplicate=False)
        return cls(dict(module.state_dict()), {name: buffer.clone() for name, buffer in buffers})


@contextmanager
def _read_whole(parameters: Sequence[torch.nn.Parameter]) -> Iterator[WholeTensor]:
    """Nothing to gather ahead: a shard (or a LoRA delta computed from shards) is all-gathered as it is read."""
    yield _full_tensor


def _full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor.detach()


_GATHERED = StateDictOptions(full_state_dict=True, cpu_offload=True)  # every rank gathers, rank 0 keeps


def sharding_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Blocks first (inner before outer, as ``fully_shard`` wants), then the other modules that
    own parameters directly. Parameters shared between units (tied embeddings) are refused."""
    block_names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in block_names]
    inside = {id(p) for block in blocks for p in block.parameters()}
    owners = [  # children before parents
        m for m in reversed(list(model.modules()))
        if type(m).__name__ not in block_names and any(id(p) not in inside for p in m.parameters(recurse=False))
    ]
    units = blocks + owners
    seen: dict[int, torch.nn.Module] = {}
    for unit in units:
        for param in unit.parameters(recurse=unit in blocks):
            if id(param) in seen and seen[id(param)] is not unit:
                raise ConfigError(
                    "train.backend=fsdp2 does not yet shard models with tied parameters "
                    f"({type(unit).__name__} shares one with {type(seen[id(param)]).__name__}); use deepspeed"
                )
            seen[id(param)] = unit
    return units
