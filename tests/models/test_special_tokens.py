"""forbidden_generation_token_ids keeps media placeholders out of sampled completions."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoProcessor, GenerationConfig

from mmgrpo.models.special_tokens import forbidden_generation_token_ids


def test_placeholders_are_forbidden_and_stop_tokens_allowed(tiny_qwen25vl: Path) -> None:
    processor = AutoProcessor.from_pretrained(tiny_qwen25vl)
    tokenizer = processor.tokenizer
    stop_ids = GenerationConfig.from_pretrained(tiny_qwen25vl).eos_token_id
    forbidden = forbidden_generation_token_ids(processor, allowed=stop_ids)

    ids = dict(zip(tokenizer.all_special_tokens, tokenizer.all_special_ids))
    for placeholder in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|im_start|>"):
        assert tokenizer.convert_tokens_to_ids(placeholder) in forbidden, placeholder
    assert ids["<|im_end|>"] not in forbidden
    assert ids["<|endoftext|>"] not in forbidden
    for tag in ("<answer>", "</answer>", "<think>"):
        assert tokenizer.convert_tokens_to_ids(tag) not in forbidden
    assert forbidden == sorted(forbidden)


def test_tokenizer_eos_stays_allowed_without_generation_config(tiny_qwen25vl: Path) -> None:
    tokenizer = AutoProcessor.from_pretrained(tiny_qwen25vl).tokenizer
    forbidden = forbidden_generation_token_ids(tokenizer)
    assert tokenizer.eos_token_id not in forbidden
    assert tokenizer.pad_token_id in forbidden  # <|endoftext|> only stops when the caller allows it
