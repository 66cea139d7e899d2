"""Every tiny family: build -> load -> chat template on media -> generate -> forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.special_tokens import forbidden_generation_token_ids
from mmgrpo.models.tiny import TINY_FAMILIES, make_tiny
from mmgrpo.models.tiny.tokenizer import REASONING_TAGS

AUDIO_FAMILIES = {"qwen2_audio"}
VISION_FAMILIES = sorted(set(TINY_FAMILIES.names()) - AUDIO_FAMILIES)
NEW_TOKENS = 6


def media_part(family: str) -> dict:
    """One media part of the family's modality: a grey image or one second of noise."""
    if family in AUDIO_FAMILIES:
        audio = np.random.default_rng(0).standard_normal(16_000).astype(np.float32) * 0.1
        return {"type": "audio", "audio": audio}
    return {"type": "image", "image": Image.new("RGB", (96, 72), (123, 117, 104))}


def prompt_inputs(processor, family: str) -> dict[str, torch.Tensor]:
    messages = [{"role": "user", "content": [media_part(family), {"type": "text", "text": "How many cubes?"}]}]
    return processor.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )


def with_completion(inputs: dict[str, torch.Tensor], sequence: torch.Tensor) -> dict[str, torch.Tensor]:
    """One prompt's inputs extended over one generated sequence ``[T]`` (prompt + completion)."""
    prompt_len, total_len = inputs["input_ids"].shape[1], sequence.shape[0]
    extended = dict(inputs, input_ids=sequence[None], attention_mask=torch.ones_like(sequence)[None])
    if "mm_token_type_ids" in inputs:  # media types over the prompt, text (0) over the completion
        extended["mm_token_type_ids"] = torch.nn.functional.pad(inputs["mm_token_type_ids"], (0, total_len - prompt_len))
    return extended


@pytest.mark.parametrize("family", TINY_FAMILIES.names())
def test_family_generates_and_scores_completions(family: str, tiny_model_dir) -> None:
    model, processor = load_model_and_processor(tiny_model_dir(family))
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    inputs = prompt_inputs(processor, family)
    forbidden = forbidden_generation_token_ids(processor, allowed=model.generation_config.eos_token_id)

    torch.manual_seed(0)
    sequences = model.generate(
        **inputs, do_sample=True, num_return_sequences=2, max_new_tokens=NEW_TOKENS, suppress_tokens=forbidden
    )
    completions = sequences[:, inputs["input_ids"].shape[1] :]
    assert completions.shape[0] == 2
    assert not set(completions.flatten().tolist()) & set(forbidden)

    for sequence in sequences:
        with torch.no_grad():
            logits = model(**with_completion(inputs, sequence)).logits  # [1, T, V]
        assert logits.shape[1] == sequence.shape[0]
        assert torch.isfinite(logits).all()


@pytest.mark.parametrize("family", VISION_FAMILIES)
def test_plain_transformers_reloads_the_checkpoint(family: str, tiny_model_dir) -> None:
    path = tiny_model_dir(family)
    model = AutoModelForImageTextToText.from_pretrained(path)
    processor = AutoProcessor.from_pretrained(path)
    assert processor.chat_template
    assert model.config.get_text_config().vocab_size == len(processor.tokenizer)


def test_same_seed_gives_identical_checkpoint(tmp_path, tiny_qwen25vl) -> None:
    again = make_tiny("qwen2_5_vl", tmp_path / "again", seed=0)
    other = make_tiny("qwen2_5_vl", tmp_path / "other", seed=1)
    for name in ("model.safetensors", "tokenizer.json", "chat_template.jinja", "processor_config.json"):
        assert (again / name).read_bytes() == (tiny_qwen25vl / name).read_bytes(), name
    assert (other / "model.safetensors").read_bytes() != (again / "model.safetensors").read_bytes()


def test_reasoning_tags_are_single_tokens_kept_by_decode(tiny_qwen25vl) -> None:
    tokenizer = AutoProcessor.from_pretrained(tiny_qwen25vl).tokenizer
    text = "<think>two and one</think><answer>3</answer>"
    ids = tokenizer(text).input_ids
    for tag in REASONING_TAGS:
        assert tokenizer.convert_tokens_to_ids(tag) in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_unknown_override_names_the_known_fields(tmp_path) -> None:
    with pytest.raises(ValueError, match="hidden_sise.*known.*hidden_size"):
        make_tiny("qwen2_5_vl", tmp_path, hidden_sise=32)
