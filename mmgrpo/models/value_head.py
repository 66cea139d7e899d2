"""A VLM reward model: a supported VLM checkpoint plus a linear value head scoring its last token.

Published multimodal reward models (Skywork-VL-Reward on Qwen2.5-VL; the reward models that
LLaMA-Factory and TRL's value-head wrapper train) are a VLM checkpoint with one extra file,
``value_head.safetensors``: a linear layer from the decoder's hidden size to one score
(or one logit per label). The score of a conversation is that layer applied to the hidden
state of its last token. Transformers has no sequence-classification class for most VLM
families, so the backbone is loaded as the policy is (family adapter, processors, budgets)
and the head is applied here.

Accepted key layouts in the head file: ``v_head.summary.weight``/``.bias`` (TRL's value head)
and ``score.weight``/``.bias`` (transformers' sequence-classification head); any prefix, one
weight and at most one bias.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported on use: the config check reads VALUE_HEAD_FILE without it
    import torch

    from mmgrpo.models.batch import PromptBatch

VALUE_HEAD_FILE = "value_head.safetensors"
MEDIA_TOWERS = ("vision_config", "audio_config")  # config keys of a multimodal checkpoint


def missing_value_head(folder: str | Path) -> str | None:
    """Why the local checkpoint ``folder`` cannot be a VLM classifier (None if it can or is not a VLM):
    read from its config.json and file list alone, nothing loaded."""
    config_file = Path(folder) / "config.json"
    if not config_file.is_file() or not any(key in json.loads(config_file.read_text()) for key in MEDIA_TOWERS):
        return None
    if (Path(folder) / VALUE_HEAD_FILE).is_file():
        return None
    return f"{folder} is a VLM checkpoint without {VALUE_HEAD_FILE}: a VLM classifier needs its value head there"


def load_value_head(checkpoint: str | Path, hidden_size: int, *, dtype: torch.dtype | None = None,
                    device: str | torch.device = "cpu") -> torch.nn.Linear:
    """The frozen ``[hidden_size -> labels]`` head stored in ``checkpoint``'s ``value_head.safetensors``.

    Raises ``FileNotFoundError`` naming the file when it is absent and ``ValueError`` when its
    keys or shapes are not one linear layer over ``hidden_size``.
    """
    import torch
    from safetensors.torch import load_file
    from transformers.utils import cached_file

    source = cached_file(str(checkpoint), VALUE_HEAD_FILE, _raise_exceptions_for_missing_entries=False)
    if source is None:
        raise FileNotFoundError(
            f"{checkpoint}: a VLM reward model needs its value head in {VALUE_HEAD_FILE} beside the weights "
            "(keys v_head.summary.weight/bias or score.weight/bias)"
        )
    tensors = load_file(source)
    weights = [key for key in tensors if key.split(".")[-1] == "weight"]
    biases = [key for key in tensors if key.split(".")[-1] == "bias"]
    if len(weights) != 1 or len(biases) > 1 or len(weights) + len(biases) != len(tensors):
        raise ValueError(f"{source}: expected one linear layer (a weight and at most one bias), found keys {sorted(tensors)}")
    weight = tensors[weights[0]]
    weight = weight[None] if weight.dim() == 1 else weight  # [labels, D]
    if weight.dim() != 2 or weight.shape[1] != hidden_size:
        raise ValueError(f"{source}: {weights[0]} has shape {tuple(tensors[weights[0]].shape)}; "
                         f"the model's hidden size is {hidden_size}")
    head = torch.nn.Linear(hidden_size, weight.shape[0], bias=bool(biases))
    with torch.no_grad():
        head.weight.copy_(weight)
        if biases:
            head.bias.copy_(tensors[biases[0]].reshape(weight.shape[0]))
    return head.to(device=device, dtype=dtype or torch.float32).eval().requires_grad_(False)


def last_token_scores(model: torch.nn.Module, head: torch.nn.Module, batch: PromptBatch) -> torch.Tensor:
    """``head`` over the hidden state of each row's last token: float32 ``[B, labels]``.

    ``batch`` holds whole conversations (the assistant turn closed), left-padded, so every
    row's last token sits in the last column.
    """
    inputs = batch.model_inputs()
    adapter = batch.adapter
    positions, _ = adapter.prompt_positions(model, inputs)
    hidden = adapter.backbone(model)(**inputs, position_ids=positions, use_cache=False).last_hidden_state  # [B, T, D]
    return head(hidden[:, -1]).float()  # [B, labels]
