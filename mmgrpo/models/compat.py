"""Differences between the transformers versions mmgrpo runs on, in one place.

Between 5.19 and 5.24, transformers renamed a model forward's ``past_key_values`` argument
(and output field) to ``cache``, and ``gradient_checkpointing_enable`` to
``activation_checkpointing_enable`` (the old names stay as deprecated aliases).
vLLM pins older versions (its CPU build: 5.19), so code that must run beside it asks here
instead of naming either spelling. An older forward does not reject ``cache=``: it lands
in ``**kwargs`` and is ignored, which silently decodes without the prompt.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import json
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import Cache, Qwen2Model
from transformers.modeling_outputs import BaseModelOutputWithPooling


@functools.cache
def cache_keyword() -> str:
    """The name under which this transformers version's forwards take and return the KV cache."""
    parameters = inspect.signature(Qwen2Model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def cache_argument(cache: Cache) -> dict[str, Cache]:
    """Keyword arguments passing ``cache`` to a model forward: ``model(..., **cache_argument(cache))``."""
    return {cache_keyword(): cache}


def enable_activation_checkpointing(
    model: torch.nn.Module, checkpointing_kwargs: dict[str, Any] | None = None
) -> None:
    """Turn on activation (gradient) checkpointing, with ``torch.utils.checkpoint`` options."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=checkpointing_kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing_kwargs)


@contextmanager
def checkpointed_layers_keep_cache(model: torch.nn.Module) -> Iterator[None]:
    """Inside, the checkpointed decoder layers of ``model`` keep a ``cache`` passed to them.

    Under activation checkpointing transformers' ``GradientCheckpointingLayer`` (5.19 and 5.24)
    replaces the cache with ``None``, unless the layer sets ``_can_checkpoint_with_cache``: a
    cache the layer writes to would be written again when the backward replays the layer. Only
    a cache whose ``update`` can be replayed (:class:`~mmgrpo.models.replay_cache.ReplayCache`)
    may be passed inside; the flag is removed on the way out.
    """
    layers = [
        module for module in model.modules()
        if getattr(module, "gradient_checkpointing", False) and hasattr(module, "_can_checkpoint_with_cache")
    ]
    if any(getattr(layer._gradient_checkpointing_func, "keywords", {}).get("use_reentrant") for layer in layers):
        raise RuntimeError(
            "a cache kept through checkpointed layers needs non-reentrant checkpointing (use_reentrant=False): "
            "reentrant checkpointing gives no gradient to the cached states"
        )
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer in layers:
            del layer._can_checkpoint_with_cache  # back to the class's False


# Qwen2-VL and Qwen2.5-VL number the text after a media item from the largest position the item
# took on any axis, + 1 (the original Qwen code, transformers <= 5.2, vLLM). transformers 5.3+
# (also 5.19 and 5.24) continue from max(height, width) instead, which for a video whose temporal
# positions outrun its height and width gives the text after it other positions than the model
# was trained with (huggingface/transformers#45381), and other ones than vLLM samples with.
ORIGINAL_POSITION_FAMILIES = ("qwen2_vl", "qwen2_5_vl")
VIDEO_TOKEN_TYPE = 2  # the processors' mm_token_type_ids: 0 text, 1 image, 2 video


def restart_text_after_media(
    position_ids: torch.Tensor, token_types: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``position_ids`` ``[3, B, T]`` renumbered so that every run of tokens (text, or one media
    item's tokens: ``token_types`` ``[B, T]``, 0 = text) starts at 1 + the largest position before
    it on any axis; a media run keeps its shape (offsets from its first token). Also returns
    ``rope_deltas`` ``[B, 1]``: largest position + 1 - real tokens, as transformers' generate uses."""
    fixed = position_ids.clone()
    deltas = []
    for row in range(position_ids.shape[1]):
        real = attention_mask[row].bool() if attention_mask is not None else torch.ones_like(token_types[row]).bool()
        columns = real.nonzero().flatten()
        positions = position_ids[:, row, columns]  # [3, n]
        renumbered = torch.empty_like(positions)
        largest, start = -1, 0
        for token_type, run_tokens in itertools.groupby(token_types[row, columns].tolist()):
            end = start + len(list(run_tokens))
            run = positions[:, start:end]
            if token_type == 0:
                run = torch.arange(end - start, device=run.device).expand(3, -1) + largest + 1
            else:
                run = run - run[0, 0] + largest + 1
            renumbered[:, start:end] = run
            largest = max(largest, int(run.max()))
            start = end
        fixed[:, row, columns] = renumbered
        deltas.append(largest + 1 - len(columns))
    return fixed, torch.tensor(deltas, device=position_ids.device).unsqueeze(1)


def use_original_qwen_positions(model: torch.nn.Module) -> None:
    """Make a Qwen2-VL / Qwen2.5-VL model (its forward, ``generate`` and mmgrpo's adapter, which all
    call ``get_rope_index``) number positions as the original code does (see above); other models
    are left as they are."""
    if getattr(model.config, "model_type", None) not in ORIGINAL_POSITION_FAMILIES:
        return
    inner = model.model
    transformers_rope_index = inner.get_rope_index

    def get_rope_index(input_ids, mm_token_type_ids, *args, attention_mask=None, **kwargs):  # noqa: ANN001, ANN202
        position_ids, deltas = transformers_rope_index(
            input_ids, mm_token_type_ids, *args, attention_mask=attention_mask, **kwargs
        )
        if not (mm_token_type_ids == VIDEO_TOKEN_TYPE).any():  # one temporal step per image: both numberings agree
            return position_ids, deltas
        return restart_text_after_media(position_ids, mm_token_type_ids, attention_mask)

    inner.get_rope_index = get_rope_index


# Qwen3-Omni's audio tower pads each clip's chunks (1 s of frames) to the longest chunk of the whole batch and runs
# its convolutions over that padding unmasked (Qwen2.5-Omni's masks it): a clip shorter than one chunk encodes
# otherwise beside a longer clip than alone (measured on the tiny model: log-probs 1.7e-3 apart), so a row's
# log-probs would depend on the rows it is batched with. Its clips are encoded one at a time, each as it is alone.
CLIPS_APART_FAMILIES = ("qwen3_omni_moe_thinker",)


def encode_audio_clips_apart(model: torch.nn.Module) -> None:
    """Make the audio tower of a family in :data:`CLIPS_APART_FAMILIES` encode each clip of a batch alone (above);
    other models are left as they are. The tower's class becomes a subclass, so a copy of the model (the KL
    reference) encodes with its own weights."""
    if getattr(model.config, "model_type", None) not in CLIPS_APART_FAMILIES:
        return
    tower = model.model.audio_tower
    tower.__class__ = _clips_apart_class(type(tower))


@functools.cache
def _clips_apart_class(tower_class: type[torch.nn.Module]) -> type[torch.nn.Module]:
    """``tower_class`` whose forward encodes each clip of a batch alone."""

    class ClipsApart(tower_class):
        def forward(
            self, input_features: torch.Tensor, feature_lens: torch.Tensor, **kwargs: Any
        ) -> BaseModelOutputWithPooling:
            """``input_features`` ``[mel bins, frames of all clips]``, ``feature_lens`` ``[clips]``: the clips' rows
            in order, each encoded alone."""
            if len(feature_lens) < 2:
                return super().forward(input_features, feature_lens=feature_lens, **kwargs)
            clips = input_features.split(feature_lens.tolist(), dim=-1)
            hidden = torch.cat([
                super(ClipsApart, self).forward(clip, feature_lens=length[None], **kwargs).last_hidden_state
                for clip, length in zip(clips, feature_lens)
            ])
            return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=hidden)

    ClipsApart.__name__ = ClipsApart.__qualname__ = f"ClipsApart{tower_class.__name__}"
    return ClipsApart


def apply_family_fixes(model: torch.nn.Module) -> None:
    """The fixes above that a loaded model of an affected family needs (positions, clip encoding)."""
    use_original_qwen_positions(model)
    encode_audio_clips_apart(model)


_NAMES_IN_FILES: weakref.WeakKeyDictionary[torch.nn.Module, dict[str, str]] = weakref.WeakKeyDictionary()


def names_in_files(model: torch.nn.Module) -> dict[str, str]:
    """:func:`read_names_in_files`, read once per model (weights are sent every optimizer step)."""
    if model not in _NAMES_IN_FILES:
        _NAMES_IN_FILES[model] = read_names_in_files(model)
    return _NAMES_IN_FILES[model]


def read_names_in_files(model: torch.nn.Module) -> dict[str, str]:
    """In-memory weight name -> key in the safetensors files of the local folder ``model`` was loaded
    from, each file key renamed as loading renames it (``{}`` without such files, or when a weight
    conversion other than renaming applies). transformers' reverse renaming is not used for this: in
    5.19 it doubles a Qwen2-Audio prefix (``language_model.model.model.*``), which vLLM rejects."""
    from safetensors import safe_open
    from transformers.core_model_loading import WeightRenaming, rename_source_key

    files = sorted(Path(getattr(model, "name_or_path", "") or "/nonexistent").glob("*.safetensors"))
    conversions = getattr(model, "_weight_conversions", None) or []
    if not files or not all(isinstance(conversion, WeightRenaming) for conversion in conversions):
        return {}
    in_memory = {name.replace(".base_layer.", ".")  # plain names under LoRA
                 for name, _ in itertools.chain(model.named_parameters(), model.named_buffers())}
    names = {}
    for file in files:
        with safe_open(str(file), framework="pt") as weights:
            for key in weights.keys():
                name = rename_source_key(key, conversions, [])[0]
                unprefixed = name.replace("." + TOWER_PREFIX, ".", 1)  # restore_tower_prefixes', dropped on load
                names[unprefixed if name not in in_memory and unprefixed in in_memory else name] = key
    return names


# Thinker model type -> (transformers module, the backbone class holding its towers and decoder).
OMNI_THINKER_BACKBONES = {
    "qwen2_5_omni_thinker": ("qwen2_5_omni", "Qwen2_5OmniThinkerModel"),
    "qwen3_omni_moe_thinker": ("qwen3_omni_moe", "Qwen3OmniMoeThinkerModel"),
}


@functools.cache
def omni_thinker_holds_towers(model_type: str) -> bool:
    """Whether this transformers' Qwen-Omni thinker ``model_type`` has one backbone holding its towers and decoder
    (``Qwen2_5OmniThinkerModel``, ``Qwen3OmniMoeThinkerModel``; 5.19's thinkers keep the towers on themselves):
    mmgrpo's forwards need that module, so without it the family is refused at load."""
    module, backbone = OMNI_THINKER_BACKBONES[model_type]
    return hasattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), backbone)


# Towers whose checkpoints keep their weights under "vision_model." (every Hub checkpoint of theirs), which newer
# transformers drops on load and does not put back on save; vLLM loads a family with such a tower only with it.
PREFIXED_TOWERS = ("SiglipVisionModel", "Siglip2VisionModel", "CLIPVisionModel")
TOWER_PREFIX = "vision_model."


def save_pretrained(model: torch.nn.Module, folder: str | Path, **kwargs: Any) -> None:
    """``model.save_pretrained(folder, **kwargs)``, its weight names as the family's Hub checkpoints have them
    (what vLLM and older transformers load): a SigLIP or CLIP tower's weights under ``vision_model.`` again."""
    model.save_pretrained(folder, **kwargs)
    if not getattr(model, "peft_config", None):  # an adapter's file names its weights PEFT's way
        restore_tower_prefixes(model, Path(folder))


def restore_tower_prefixes(model: torch.nn.Module, folder: Path) -> None:
    """Rename, in the safetensors files of ``folder`` (and their index), the saved weights of each tower in
    ``PREFIXED_TOWERS`` that holds its layers itself (no ``vision_model`` child) to ``<its prefix>vision_model.``."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    towers = [module for module in model.modules()
              if type(module).__name__ in PREFIXED_TOWERS and not hasattr(module, "vision_model")]
    files = sorted(folder.glob("*.safetensors"))
    if not towers or not files:
        return
    keys: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as weights:
            keys.update(weights.keys())
    renamed = {}
    for tower in towers:
        inner = list(tower.state_dict())
        for prefix in {key[: -len(inner[0])] for key in keys if key.endswith("." + inner[0])}:
            # transformers puts the prefix back itself for a model it loaded from files that had it
            if not prefix.endswith("." + TOWER_PREFIX) and all(prefix + name in keys for name in inner):
                renamed |= {prefix + name: prefix + TOWER_PREFIX + name for name in inner}
    if not renamed:
        return
    for file in files:
        with safe_open(str(file), framework="pt") as weights:
            metadata = weights.metadata()
        tensors = load_file(str(file))
        if renamed.keys() & tensors.keys():
            save_file({renamed.get(key, key): tensor for key, tensor in tensors.items()}, str(file), metadata=metadata)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        mapping = json.loads(index.read_text())
        mapping["weight_map"] = {renamed.get(key, key): file for key, file in mapping["weight_map"].items()}
        index.write_text(json.dumps(mapping, indent=2))
