"""The frozen reference policy the KL penalty pulls toward: the policy as GRPO found it.

Full fine-tuning keeps a frozen copy (or, resumed or sharded, a reload from where the run's initial policy
came from); LoRA needs no second model: the base with adapters off, or with the frozen SFT adapter a LoRA SFT
left, loaded beside the adapter GRPO trains.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch

from mmgrpo.config import Config
from mmgrpo.models.loading import ADAPTER_CONFIG, load_model_and_processor
from mmgrpo.trainer.setup import loading_device

REFERENCE_ADAPTER = "reference"  # the frozen SFT adapter of a LoRA run's KL reference


class Reference:
    """The frozen reference policy: a module and the context under which it is the reference."""

    def __init__(self, module: torch.nn.Module, context: Callable[[], Any]) -> None:
        self.module, self.context = module, context


def make_reference(config: Config, model: torch.nn.Module, source: str | None, *, fresh: bool) -> Reference | None:
    """None when beta = 0; with LoRA see :func:`lora_reference`; else a frozen initial policy: a copy of
    ``model`` in a fresh run, reloaded from ``source`` in a resumed one, sharing the policy's frozen parameters.
    Under a back end that shards the weights it is always loaded from ``source``, on the CPU: the back end shards
    it onto the device (``prepare_frozen``), where a copy of the policy would put a second whole model on every
    rank's device."""
    if config.algo.beta == 0:
        return None
    if config.lora.enabled:
        return lora_reference(model, source)
    if source is None:
        raise ValueError("algo.beta > 0 with full fine-tuning needs reference_source: where the initial policy loads from")
    sharded = config.train.shards_weights
    shared = {} if sharded else _frozen_parameters(model)
    if fresh and not sharded:
        frozen = copy.deepcopy(model, {id(parameter): parameter for parameter in shared.values()})
    else:
        frozen, _ = load_model_and_processor(
            source, dtype=config.model.dtype, attn_implementation=config.model.attn_implementation,
            trust_remote_code=config.model.trust_remote_code,
            device=loading_device(config, torch.device("cpu")) if sharded else next(model.parameters()).device,
        )
        for name, parameter in shared.items():
            owner, _, leaf = name.rpartition(".")
            setattr(frozen.get_submodule(owner), leaf, parameter)
    frozen.eval().requires_grad_(False)
    return Reference(frozen, nullcontext)


def _frozen_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The policy's frozen parameters by every name (``model.freeze_*``): they never change, so the reference
    uses them rather than a copy of its own. Only under back ends that keep whole weights on every rank (one
    process, ZeRO-2: a cast of the reference to the policy's dtype finds the shared ones cast already); sharding
    ones shard the reference on their own."""
    return {name: parameter for name, parameter in model.named_parameters(remove_duplicate=False)
            if not parameter.requires_grad}


def lora_reference(model: Any, source: str | None) -> Reference:
    """The initial policy under LoRA: the base with adapters off, or, when the run starts from a LoRA SFT
    (``source`` holds an adapter), the base with that SFT adapter, loaded frozen beside the adapter GRPO trains
    (no second copy of the base)."""
    if source is None or not (Path(source) / ADAPTER_CONFIG).is_file():
        return Reference(model, model.disable_adapter)
    model.load_adapter(str(source), adapter_name=REFERENCE_ADAPTER, is_trainable=False)
    trained = model.active_adapter
    return Reference(model, lambda: _adapter_active(model, REFERENCE_ADAPTER, then=trained))


@contextmanager
def _adapter_active(model: Any, name: str, *, then: str) -> Iterator[None]:
    """Run the block with LoRA adapter ``name`` active, then make ``then`` active (and trainable) again."""
    model.set_adapter(name)
    try:
        yield
    finally:
        model.set_adapter(then)
