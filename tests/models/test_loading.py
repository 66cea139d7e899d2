"""load_model_and_processor: dtypes, attention choice, class selection and clear errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForImageTextToText,
    AutoModelForMultimodalLM,
    Qwen2_5OmniConfig,
    Qwen2_5OmniThinkerConfig,
    Qwen2Config,
    Qwen3OmniMoeConfig,
    Qwen3OmniMoeThinkerConfig,
)

from mmgrpo.models.loading import ModelLoadError, load_model_and_processor, model_class_for

MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def copy_files(source: Path, target: Path, names: tuple[str, ...]) -> Path:
    target.mkdir()
    for name in names:
        shutil.copy(source / name, target / name)
    return target


def test_loads_in_the_requested_dtype_and_attention(tiny_qwen25vl: Path) -> None:
    model, processor = load_model_and_processor(tiny_qwen25vl, dtype="bfloat16", attn_implementation="eager")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.config._attn_implementation == "eager"
    assert processor.chat_template


def test_on_the_meta_device_the_model_is_made_without_weights_as_loading_would_make_it(
    tiny_qwen25vl: Path, tmp_path: Path
) -> None:
    """What a rank receiving its shards makes (sharded loading under FSDP2 and ZeRO-3): the same modules, shapes and
    dtype, the generation config read as from_pretrained reads it (its stop tokens decide where completions end)."""
    source = tmp_path / "model"
    shutil.copytree(tiny_qwen25vl, source)
    generation = json.loads((source / "generation_config.json").read_text())
    (source / "generation_config.json").write_text(json.dumps({**generation, "eos_token_id": [5, 7]}))
    empty, processor = load_model_and_processor(source, device="meta", dtype="bfloat16")
    loaded, _ = load_model_and_processor(source, dtype="bfloat16")
    assert all(parameter.is_meta for parameter in empty.parameters()) and processor.chat_template
    assert {name: (p.shape, p.dtype) for name, p in empty.named_parameters()} == \
        {name: (p.shape, p.dtype) for name, p in loaded.named_parameters()}
    assert empty.generation_config.eos_token_id == loaded.generation_config.eos_token_id == [5, 7]


def test_unknown_dtype_is_refused(tiny_qwen25vl: Path) -> None:
    with pytest.raises(ModelLoadError, match="unknown dtype 'fp8'"):
        load_model_and_processor(tiny_qwen25vl, dtype="fp8")


def test_missing_directory_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ModelLoadError, match=f"{missing}: no such checkpoint directory"):
        load_model_and_processor(missing)


def test_checkpoint_without_processor_names_the_path(tiny_qwen25vl: Path, tmp_path: Path) -> None:
    weights_only = copy_files(tiny_qwen25vl, tmp_path / "weights_only", MODEL_FILES)
    with pytest.raises(ModelLoadError, match=f"{weights_only}: cannot load the processor"):
        load_model_and_processor(weights_only)


def test_tokenizer_without_media_processor_is_refused(tiny_qwen25vl: Path, tmp_path: Path) -> None:
    text_only = copy_files(tiny_qwen25vl, tmp_path / "text_only", TOKENIZER_FILES)
    tokenizer_config = text_only / "tokenizer_config.json"  # as a text-only LLM saves it
    settings = json.loads(tokenizer_config.read_text())
    del settings["processor_class"]
    tokenizer_config.write_text(json.dumps(settings))
    with pytest.raises(ModelLoadError, match=f"{text_only}: found only a .*no multimodal processor"):
        load_model_and_processor(text_only)


def test_processor_without_chat_template_is_refused(tiny_qwen25vl: Path, tmp_path: Path) -> None:
    no_template = tmp_path / "no_template"
    shutil.copytree(tiny_qwen25vl, no_template)
    (no_template / "chat_template.jinja").unlink()
    with pytest.raises(ModelLoadError, match=f"{no_template}: the processor has no chat template"):
        load_model_and_processor(no_template)


def test_unreachable_hub_id_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match="no-such-org/no-such-model: cannot load"):
        load_model_and_processor("no-such-org/no-such-model")


def test_model_class_follows_the_config(tiny_qwen25vl: Path) -> None:
    assert model_class_for(AutoConfig.from_pretrained(tiny_qwen25vl), "x") is AutoModelForImageTextToText
    audio_config = AutoConfig.for_model("qwen2_audio")
    assert model_class_for(audio_config, "x") is AutoModelForMultimodalLM
    with pytest.raises(ModelLoadError, match="text_lm: model type 'qwen2' is not an image/audio-text-to-text"):
        model_class_for(Qwen2Config(), "text_lm")


@pytest.mark.parametrize("model_type", ["ernie4_5_vl_moe", "paddleocr_vl"])
def test_families_with_multi_axis_positions_and_no_adapter_are_refused(model_type: str) -> None:
    """The generic adapter's 1-D positions would silently train an M-RoPE family wrong."""
    config = AutoConfig.for_model(model_type)
    with pytest.raises(ModelLoadError, match=f"omni_or_glm: model type '{config.model_type}' computes multi-axis"):
        model_class_for(config, "omni_or_glm")


@pytest.mark.parametrize(("full", "thinker", "backbone"), [
    (Qwen2_5OmniConfig, Qwen2_5OmniThinkerConfig, "Qwen2_5OmniThinkerModel"),
    (Qwen3OmniMoeConfig, Qwen3OmniMoeThinkerConfig, "Qwen3OmniMoeThinkerModel"),
], ids=["qwen2_5_omni", "qwen3_omni_moe"])
def test_omni_loads_as_its_thinker_and_the_full_checkpoint_is_refused(full, thinker, backbone) -> None:
    from mmgrpo.models.compat import omni_thinker_holds_towers

    if omni_thinker_holds_towers(thinker.model_type):
        assert model_class_for(thinker(), "thinker") is AutoModelForImageTextToText
    else:  # an older transformers (5.19): the thinker is refused, saying why
        with pytest.raises(ModelLoadError, match=f"has no {backbone}"):
            model_class_for(thinker(), "thinker")
    refused = rf"omni: model type '{full.model_type}' is refused: .*\.thinker\.save_pretrained"
    with pytest.raises(ModelLoadError, match=refused):
        model_class_for(full(), "omni")
