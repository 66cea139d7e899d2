"""Every tiny family: build -> load -> chat template on media -> generate -> forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoModelForMultimodalLM, AutoProcessor

from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.special_tokens import forbidden_generation_token_ids
from mmgrpo.models.tiny import TINY_FAMILIES, make_tiny
from mmgrpo.models.tiny.families import DEFAULT_MAX_IMAGE_TOKENS, DEFAULT_MIN_IMAGE_TOKENS
from mmgrpo.models.tiny.qwen import mrope_section
from mmgrpo.models.tiny.tokenizer import REASONING_TAGS

AUDIO_FAMILIES = {"qwen2_audio"}
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
        extended["mm_token_type_ids"] = torch.nn.functional.pad(
            inputs["mm_token_type_ids"], (0, total_len - prompt_len)
        )
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


@pytest.mark.parametrize("family", TINY_FAMILIES.names())
def test_plain_transformers_reloads_the_checkpoint(family: str, tiny_model_dir) -> None:
    path = tiny_model_dir(family)
    auto_class = AutoModelForMultimodalLM if family in AUDIO_FAMILIES else AutoModelForImageTextToText
    model = auto_class.from_pretrained(path)
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


def merged_image_tokens(checkpoint, size: tuple[int, int]) -> int:
    image_processor = AutoProcessor.from_pretrained(checkpoint).image_processor
    grid = image_processor(images=[Image.new("RGB", size)], return_tensors="pt")["image_grid_thw"]  # [1, 3]
    return int(grid.prod()) // image_processor.merge_size**2


@pytest.mark.parametrize("size", [(1280, 960), (960, 1280), (20, 20), (96, 72)])
def test_qwen_image_tokens_stay_within_the_default_budget(tiny_qwen25vl, size: tuple[int, int]) -> None:
    assert DEFAULT_MIN_IMAGE_TOKENS <= merged_image_tokens(tiny_qwen25vl, size) <= DEFAULT_MAX_IMAGE_TOKENS


def test_pixel_budget_is_overridable(tmp_path) -> None:
    path = make_tiny("qwen2_5_vl", tmp_path, max_pixels=2 * 28 * 28)
    assert merged_image_tokens(path, (640, 480)) <= 2


@pytest.mark.parametrize(("head_dim", "section"), [(128, [16, 24, 24]), (16, [2, 3, 3]), (32, [4, 6, 6])])
def test_mrope_section_splits_half_the_head_dim_like_qwen(head_dim: int, section: list[int]) -> None:
    assert mrope_section(head_dim) == section
    assert sum(section) == head_dim // 2
