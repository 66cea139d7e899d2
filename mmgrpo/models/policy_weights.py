"""The policy's weights as a copy elsewhere needs them: a plain model's names, LoRA merged.

Rollout engines that hold their own copy of the policy (a vLLM engine, an asynchronous
rollout worker) are built from a checkpoint folder and then receive the trainer's weights
after every optimizer step. These helpers give that folder and those weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import torch
from transformers import ProcessorMixin

from mmgrpo.models.compat import save_pretrained
from mmgrpo.models.adapters import unwrap_model


def checkpoint_dir(model: torch.nn.Module, processor: ProcessorMixin, scratch: Path) -> Path:
    """A folder the policy's architecture and processor load from: its own checkpoint folder when it
    has one, else ``scratch`` with the policy and processor saved into it (its weights are replaced anyway)."""
    source = Path(unwrap_model(model).name_or_path or "")
    if (source / "config.json").is_file():
        return source
    save_pretrained(unwrap_model(model), scratch)
    processor.save_pretrained(scratch)
    return scratch


def plain_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The policy's weights keyed as the plain (non-PEFT) model names them in memory: a PEFT LoRA
    model gives its merged weights (base + scaled B @ A), the model itself left untouched."""
    return dict(streamed_plain_weights(model))


WholeTensor = Callable[[torch.Tensor], torch.Tensor]  # a parameter (or a tensor computed from some) -> its whole value
Gather = Callable[[Sequence[torch.nn.Parameter]], AbstractContextManager[WholeTensor]]


@contextmanager
def _held_whole(parameters: Sequence[torch.nn.Parameter]) -> Iterator[WholeTensor]:
    """Parameters this process holds whole: nothing to gather."""
    yield torch.Tensor.detach


@torch.no_grad()
def streamed_plain_weights(
    model: torch.nn.Module, gather: Gather = _held_whole, skip: frozenset[str] = frozenset()
) -> Iterator[tuple[str, torch.Tensor]]:
    """:func:`plain_weights` one tensor at a time, less the names in ``skip``, for weights that may be sharded:
    ``gather(parameters)`` makes them whole inside its block and gives what reads a whole value (of a
    parameter, or of a LoRA delta computed from its layer's gathered parameters). A LoRA layer's base weight
    is gathered with its adapters and yielded merged, under the plain name; adapters themselves are not
    yielded. Gathering may be collective: every rank must consume all of it, in order, with the same
    ``skip``; a tensor may be freed once the next is drawn."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else unwrap_model(model)
    layers = {f"{name}.base_layer.weight": module for name, module in base.named_modules() if _is_lora_layer(module)}
    parameters = dict(base.named_parameters(remove_duplicate=False))
    for name, tensor in base.state_dict(keep_vars=True).items():
        if "modules_to_save" in name or "original_module" in name:
            raise NotImplementedError(f"LoRA modules_to_save ({name}) cannot be synced to a rollout engine yet")
        plain = name.replace(".base_layer.", ".")
        if ".lora_" in name or plain in skip:
            continue
        layer = layers.get(name)
        together = [parameters[name]] if name in parameters else []
        together += [p for n, p in layer.named_parameters() if n.startswith("lora_")] if layer is not None else []
        with gather(together) as whole:
            value = whole(tensor)
            if layer is not None:
                value = value + whole(_lora_delta(layer)).to(value.dtype)
            yield plain, value


def _is_lora_layer(module: torch.nn.Module) -> bool:
    return hasattr(module, "get_delta_weight") and hasattr(module, "base_layer")


def _lora_delta(layer: torch.nn.Module) -> torch.Tensor:
    """The sum of ``layer``'s active adapters' deltas (scaled B @ A, shaped as its base weight)."""
    return sum(layer.get_delta_weight(adapter) for adapter in layer.active_adapters)
