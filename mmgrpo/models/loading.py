"""Load a Hugging Face VLM and its processor from a local directory or a Hub id.

Checkpoints loadable through ``AutoModelForImageTextToText`` load; audio-language
families that transformers files elsewhere are found through ``AutoModelForMultimodalLM``.
A family that numbers its positions itself (multi-axis rotary positions such as Qwen-VL's
M-RoPE, found by the ``get_rope_index`` of its modeling code) loads only when
``mmgrpo.models.adapters`` has an adapter for it: the generic adapter's 1-D positions
would train it on wrong positions without any error (ERNIE-4.5-VL, PaddleOCR-VL, ... are refused).
Qwen2.5-Omni and Qwen3-Omni train as their thinkers (``qwen2_5_omni_thinker``, ``qwen3_omni_moe_thinker``: text
out); a full ``qwen2_5_omni`` or ``qwen3_omni_moe`` checkpoint (thinker + talker, speech out) is refused with how to
save its thinker alone.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
import transformers
from peft import PeftModel
from transformers import (
    AutoConfig,
    AutoModelForImageTextToText,
    AutoModelForMultimodalLM,
    AutoProcessor,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
    ProcessorMixin,
)

from mmgrpo.models.adapters import FAMILY_ADAPTERS
from mmgrpo.models.compat import OMNI_THINKER_BACKBONES, apply_family_fixes, omni_thinker_holds_towers
from mmgrpo.models.special_tokens import tokenizer_of

T = TypeVar("T")
DType = Literal["auto", "float32", "bfloat16", "float16"]
DTYPES: dict[str, torch.dtype | str] = {
    "auto": "auto",  # the checkpoint's own dtype (config.dtype)
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

# Tried in order; the first that knows the config's model type loads the checkpoint.
AUTO_MODEL_CLASSES = (AutoModelForImageTextToText, AutoModelForMultimodalLM)
# Model types refused whatever their positions, and why.
REFUSED_FAMILIES = {
    model_type: (
        f"a full {name} checkpoint (thinker + talker + speech decoder): mmgrpo trains the thinker (text out) alone; "
        f"save it with {model_class}.from_pretrained(path).thinker.save_pretrained(out) "
        f"(and the processor beside it) and load that (model type '{model_type}_thinker')"
    )
    for model_type, name, model_class in (
        ("qwen2_5_omni", "Qwen2.5-Omni", "Qwen2_5OmniForConditionalGeneration"),
        ("qwen3_omni_moe", "Qwen3-Omni", "Qwen3OmniMoeForConditionalGeneration"),
    )
}
for _thinker, (_, _backbone) in OMNI_THINKER_BACKBONES.items():
    if not omni_thinker_holds_towers(_thinker):
        REFUSED_FAMILIES[_thinker] = (
            f"this transformers ({transformers.__version__}) keeps the thinker's towers outside its backbone (it has "
            f"no {_backbone}), and mmgrpo's forwards need them inside: use a newer transformers (5.25 is tested)"
        )


ADAPTER_CONFIG = "adapter_config.json"  # what PEFT writes beside a saved adapter


class ModelLoadError(ValueError):
    """A checkpoint could not be loaded as a VLM policy; the message names the path or id."""


def load_model_and_processor(
    name_or_path: str | Path,
    *,
    dtype: DType = "float32",
    attn_implementation: str | None = None,
    trust_remote_code: bool = False,
    device: str | torch.device = "cpu",
) -> tuple[PreTrainedModel, ProcessorMixin]:
    """Load the model (on ``device``, in ``dtype``; on ``meta``: its modules only, no weights read) and its multimodal
    processor.

    ``attn_implementation`` is passed to transformers (None = its default, usually
    "sdpa"). ``trust_remote_code`` stays off unless the caller's config turns it on.
    Raises :class:`ModelLoadError` for a missing path, an unreachable Hub id, an
    unsupported architecture, or a processor without a chat template.
    """
    source = _resolve(name_or_path)
    if dtype not in DTYPES:
        raise ModelLoadError(f"{source}: unknown dtype {dtype!r}; choose one of {sorted(DTYPES)}")
    adapter_config = Path(source) / ADAPTER_CONFIG
    if torch.device(device).type == "meta":
        return _empty_model(source, DTYPES[dtype], attn_implementation, trust_remote_code, adapter_config.is_file())
    if adapter_config.is_file():  # a LoRA checkpoint: its base model plus the saved adapter
        base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
        model, _ = load_model_and_processor(
            base, dtype=dtype, attn_implementation=attn_implementation,
            trust_remote_code=trust_remote_code, device=device,
        )
        adapted = _load(source, "LoRA adapter", lambda path: PeftModel.from_pretrained(model, path))
        return adapted.to(device), load_processor(source, trust_remote_code=trust_remote_code)
    processor = load_processor(source, trust_remote_code=trust_remote_code)
    config = load_model_config(source, trust_remote_code=trust_remote_code)
    model_class = model_class_for(config, source)
    model = _load(
        source,
        "model weights",
        model_class.from_pretrained,
        dtype=DTYPES[dtype],
        attn_implementation=attn_implementation,
        trust_remote_code=trust_remote_code,
    )
    apply_family_fixes(model)
    return model.to(device), processor


def _empty_model(
    source: str, dtype: torch.dtype, attn_implementation: str | None, trust_remote_code: bool, adapter: bool,
) -> tuple[PreTrainedModel, ProcessorMixin]:
    """The model of ``source`` on the meta device: its modules and shapes, no weights read (a rank that receives its
    shards of another rank's copy, :mod:`mmgrpo.trainer.backends.sharded_loading`)."""
    if adapter:
        raise ModelLoadError(f"{source}: a LoRA checkpoint cannot be made on the meta device (its base is read whole)")
    processor = load_processor(source, trust_remote_code=trust_remote_code)
    config = load_model_config(source, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = model_class_for(config, source).from_config(
            config, dtype=dtype, attn_implementation=attn_implementation, trust_remote_code=trust_remote_code
        )
    try:  # as from_pretrained reads it (stop tokens beyond config.json's, sampling defaults)
        model.generation_config = GenerationConfig.from_pretrained(source)
    except OSError:  # none saved: the one made from the config
        pass
    apply_family_fixes(model)
    return model, processor


def load_model_config(name_or_path: str | Path, *, trust_remote_code: bool = False) -> PretrainedConfig:
    """The checkpoint's model config alone (no weights), with the loader's clear errors."""
    source = _resolve(name_or_path)
    return _load(source, "config", AutoConfig.from_pretrained, trust_remote_code=trust_remote_code)


def load_processor(name_or_path: str | Path, *, trust_remote_code: bool = False) -> ProcessorMixin:
    """The checkpoint's multimodal processor; it must carry a chat template."""
    source = _resolve(name_or_path)
    processor = _load(source, "processor", AutoProcessor.from_pretrained, trust_remote_code=trust_remote_code)
    if not isinstance(processor, ProcessorMixin):
        raise ModelLoadError(
            f"{source}: found only a {type(processor).__name__}, no multimodal processor "
            "(processor_config.json / preprocessor_config.json is missing)"
        )
    if not (processor.chat_template or tokenizer_of(processor).chat_template):
        raise ModelLoadError(f"{source}: the processor has no chat template (chat_template.jinja is missing)")
    return processor


def model_class_for(config: PretrainedConfig, source: str) -> type[PreTrainedModel]:
    """The first auto class that knows ``config``, if mmgrpo can compute the family's positions."""
    if config.model_type in REFUSED_FAMILIES:
        reason = REFUSED_FAMILIES[config.model_type]
        raise ModelLoadError(f"{source}: model type {config.model_type!r} is refused: {reason}")
    for auto_class in AUTO_MODEL_CLASSES:
        if type(config) in auto_class._model_mapping:
            _require_position_adapter(config, auto_class._model_mapping[type(config)], source)
            return auto_class
    raise ModelLoadError(
        f"{source}: model type {config.model_type!r} is not an image/audio-text-to-text model "
        f"known to {', '.join(cls.__name__ for cls in AUTO_MODEL_CLASSES)}"
    )


def _require_position_adapter(config: PretrainedConfig, model_class: type, source: str) -> None:
    """Refuse a family whose modeling code computes multi-axis positions (``get_rope_index``) but has no adapter."""
    if config.model_type in FAMILY_ADAPTERS:
        return
    module = vars(sys.modules[model_class.__module__]).values()
    if any(isinstance(member, type) and hasattr(member, "get_rope_index") for member in module):
        raise ModelLoadError(
            f"{source}: model type {config.model_type!r} computes multi-axis (M-RoPE) position ids, and mmgrpo "
            f"has no family adapter for it, so it would train on wrong positions; families with an adapter: "
            f"{', '.join(FAMILY_ADAPTERS.names())} (add one in mmgrpo/models/adapters/)"
        )


def _resolve(name_or_path: str | Path) -> str:
    """A local directory as a string, or a Hub id; a local-looking path must exist."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    looks_local = isinstance(name_or_path, Path) or text.startswith((".", "/", "~")) or text.count("/") > 1
    if path.is_dir():
        return str(path)
    if looks_local or path.exists():
        raise ModelLoadError(f"{text}: no such checkpoint directory")
    return text


def _load(source: str, what: str, loader: Callable[..., T], **kwargs: Any) -> T:
    """Call a ``from_pretrained`` loader, turning its failures into one clear error."""
    try:
        return loader(source, **kwargs)
    except (OSError, ValueError, KeyError) as error:
        raise ModelLoadError(f"{source}: cannot load the {what}: {error}") from error
