"""The policy's weights as a copy elsewhere needs them: a plain model's names, LoRA merged.

Rollout engines that hold their own copy of the policy (a vLLM engine, an asynchronous
rollout worker) are built from a checkpoint folder and then receive the trainer's weights
after every optimizer step. These helpers give that folder and those weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from transformers import ProcessorMixin

from mmgrpo.models.adapters import unwrap_model


def checkpoint_dir(model: torch.nn.Module, processor: ProcessorMixin, scratch: Path) -> Path:
    """A folder the policy's architecture and processor load from: its own checkpoint folder when it
    has one, else ``scratch`` with the policy and processor saved into it (its weights are replaced anyway)."""
    source = Path(unwrap_model(model).name_or_path or "")
    if (source / "config.json").is_file():
        return source
    unwrap_model(model).save_pretrained(scratch)
    processor.save_pretrained(scratch)
    return scratch


def plain_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The policy's weights keyed as the plain (non-PEFT) model names them in memory: a PEFT LoRA
    model gives its merged weights (base + scaled B @ A), the model itself left untouched."""
    if hasattr(model, "get_base_model"):
        return dict(merged_lora_weights(model))
    return {name: tensor.detach() for name, tensor in unwrap_model(model).state_dict().items()}


@torch.no_grad()
def merged_lora_weights(peft_model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The base model's weights with each LoRA layer's active adapters added, under the base names."""
    base = peft_model.get_base_model()
    deltas = {
        f"{name}.base_layer.weight": sum(module.get_delta_weight(adapter) for adapter in module.active_adapters)
        for name, module in base.named_modules()
        if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer")
    }
    for name, tensor in base.state_dict().items():
        if "modules_to_save" in name or "original_module" in name:
            raise NotImplementedError(f"LoRA modules_to_save ({name}) cannot be synced to a rollout engine yet")
        if ".lora_" in name:
            continue
        merged = tensor + deltas[name].to(tensor.dtype) if name in deltas else tensor
        yield name.replace(".base_layer.", "."), merged.detach()
