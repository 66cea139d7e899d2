"""Sharded loading: the main process holds the only whole copy of a module (in CPU memory), every other rank made it
on the meta device (:func:`~mmgrpo.trainer.setup.loading_device`); the back end gives each rank its part.

Both sharding back ends send the buffers (:func:`broadcast_buffers`); ZeRO-3 partitions the parameters one module
at a time, each parameter broadcast from the main process just before it is partitioned
(:func:`partition_from_main_process`). FSDP2 scatters its shards itself (``set_model_state_dict``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

SLOT_ALIGNMENT = 64  # bytes: each parameter's view of the receive buffer starts at such a multiple

def broadcast_buffers(
    module: torch.nn.Module, device: torch.device, main_values: Mapping[str, torch.Tensor] | None = None
) -> None:
    """Every buffer of ``module`` (the non-persistent ones too: rotary frequencies, which no checkpoint holds) made
    on ``device`` on every rank with the main process's values: its own buffers, or ``main_values`` (by name, every
    name of a shared buffer) where its module no longer holds them (FSDP2's ``to_empty`` clears them)."""
    main = torch.distributed.get_rank() == 0
    values = main_values if main_values is not None else dict(module.named_buffers(remove_duplicate=False))
    for prefix, owner in module.named_modules():
        for name, buffer in owner.named_buffers(recurse=False):
            received = values[f"{prefix}.{name}" if prefix else name].to(device) if main \
                else torch.empty_like(buffer, device=device)
            torch.distributed.broadcast(received, src=0)
            owner._buffers[name] = received


def partition_from_main_process(
    deepspeed: Any, module: torch.nn.Module, config: dict[str, Any], device: torch.device, dtype: torch.dtype | None,
) -> None:
    """``module``'s parameters partitioned by ZeRO-3 (``config``) with the main process's values, in ``dtype`` (floating
    ones; None: as they are), its buffers whole on ``device``.

    One module's own parameters at a time, children first: each is made on ``device`` and ``zero.Init`` broadcasts
    it from the main process and keeps this rank's partition, dropping the whole tensor (on the main process, that
    part of its loaded copy). A parameter on the meta device is received into one buffer reused for every module
    (sized for the largest), so no other rank holds more than one module's parameters whole beside its partitions; a
    tensor made and freed per parameter instead scattered the partitions between freed blocks the C allocator kept
    (measured on CPU: 250 MiB more host memory held after partitioning 964 MiB). Parameters keep their identity (an
    optimizer built on them, tied weights stay valid)."""
    owners = list(reversed(list(module.modules())))  # children before parents
    receiving = torch.empty(max(_meta_bytes(owner, dtype) for owner in owners), dtype=torch.uint8, device=device)
    for owner in owners:
        own = [parameter for parameter in owner.parameters(recurse=False) if not hasattr(parameter, "ds_id")]
        if own:  # a tied parameter is partitioned with its first owner
            offset = 0
            for parameter in own:
                offset = _materialise(parameter, device, dtype, receiving, offset)
            deepspeed.zero.Init(module=owner, config_dict_or_path=config)
    broadcast_buffers(module, device)


def _target_dtype(parameter: torch.nn.Parameter, dtype: torch.dtype | None) -> torch.dtype:
    return dtype if dtype is not None and parameter.is_floating_point() else parameter.dtype


def _slot_bytes(parameter: torch.nn.Parameter, dtype: torch.dtype | None) -> int:
    """The bytes ``parameter`` takes in the receive buffer, in ``dtype``, rounded up so that the next one is aligned."""
    return -(-parameter.numel() * _target_dtype(parameter, dtype).itemsize // SLOT_ALIGNMENT) * SLOT_ALIGNMENT


def _meta_bytes(owner: torch.nn.Module, dtype: torch.dtype | None) -> int:
    """The receive buffer's bytes for ``owner``'s own parameters on the meta device."""
    return sum(_slot_bytes(parameter, dtype) for parameter in owner.parameters(recurse=False) if parameter.is_meta)


def _materialise(
    parameter: torch.nn.Parameter, device: torch.device, dtype: torch.dtype | None, receiving: torch.Tensor,
    offset: int,
) -> int:
    """``parameter`` on ``device`` in ``dtype`` (floating ones), in place: its values, or where it is on meta, a view of
    ``receiving`` from byte ``offset`` on (its values still to come); the offset after it."""
    target = _target_dtype(parameter, dtype)
    if not parameter.is_meta:
        parameter.data = parameter.data.to(device=device, dtype=target)
        return offset
    size = parameter.numel() * target.itemsize
    view = receiving[offset:offset + size].view(target).view(parameter.shape)  # an aligned offset: any dtype
    empty = torch.nn.Parameter(view, requires_grad=parameter.requires_grad)
    vars(empty).update(vars(parameter))  # swapped back with the tensors: the attributes others set stay
    torch.utils.swap_tensors(parameter, empty)  # a meta tensor's data cannot be replaced by a real one
    return offset + _slot_bytes(parameter, dtype)
