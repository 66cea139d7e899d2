"""Placeholder tokens must match media features; a mismatch names the sample before any forward."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from mmgrpo.models.adapters import adapter_for
from mmgrpo.models.batch import PLACEHOLDER_MISMATCH, build_prompt_batch
from mmgrpo.models.train_batch import build_train_batch
from mmgrpo.models.media_check import MediaTokenMismatchError, check_media_tokens
from mmgrpo.models.shared_prefix import grouped_logprobs
from mmgrpo.types import Sample


def encoded_prompts(processor, samples) -> dict[str, torch.Tensor]:
    """What the family's processor returns for ``samples`` (no truncation)."""
    texts = [processor.apply_chat_template(s.messages, tokenize=False, add_generation_prompt=True) for s in samples]
    images = [[Image.open(path) for path in s.media("image")] for s in samples]
    return dict(processor(text=texts, images=images, padding=True, padding_side="left", return_tensors="pt"))


def test_truncated_image_tokens_raise_naming_the_sample(load_tiny, media_samples) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    samples = media_samples("qwen2_5_vl")
    encoded = encoded_prompts(processor, samples)
    adapter = adapter_for("qwen2_5_vl")
    counts = [{"image": 1}] * 3
    expected = adapter.expected_media_tokens(processor, encoded, counts)
    image_id = processor.image_token_id
    # 112 x 112 pixels = 8 x 8 patches of 14 px, merged 2 x 2 -> 16 tokens.
    assert expected[0]["image"] == 16
    check_media_tokens(encoded["input_ids"], expected, {"image": image_id}, [s.id for s in samples])  # intact: fine

    truncated = encoded["input_ids"].clone()
    cut = (truncated[1] == image_id).nonzero()[-3:, 0]  # drop row 1's last three image tokens
    truncated[1, cut] = processor.tokenizer.pad_token_id
    with pytest.raises(MediaTokenMismatchError, match=rf"sample '{samples[1].id}'.*image") as error:
        check_media_tokens(truncated, expected, {"image": image_id}, [s.id for s in samples])
    assert (error.value.found, error.value.expected) == (expected[1]["image"] - 3, expected[1]["image"])


def test_prompt_placeholders_without_media_are_rejected(load_tiny) -> None:
    """A bad row: its text holds a placeholder token but it carries no image. It is left out, named."""
    _, processor = load_tiny("qwen2_5_vl")
    content = [{"type": "text", "text": f"look {processor.image_token} here"}]
    sample = Sample(id="row-17", task="test", messages=[{"role": "user", "content": content}])
    (skipped,) = build_prompt_batch(processor, [sample], family="qwen2_5_vl").dropped
    assert (skipped.row_id, skipped.reason) == ("row-17", PLACEHOLDER_MISMATCH)
    assert skipped.detail.startswith("sample 'row-17': 1 image placeholder tokens but image inputs")


def test_placeholder_sampled_in_a_completion_is_rejected(load_tiny, media_samples) -> None:
    model, processor = load_tiny("qwen2_5_vl")
    samples = media_samples("qwen2_5_vl")[:2]
    image_id = processor.image_token_id
    completions = [[5, 6], [7, image_id, 8]]
    with pytest.raises(MediaTokenMismatchError, match=f"sample '{samples[1].id}'"):
        build_train_batch(processor, samples, completions, family="qwen2_5_vl")
    prompts = build_prompt_batch(processor, samples, family="qwen2_5_vl")
    with pytest.raises(MediaTokenMismatchError, match=f"sample '{samples[1].id}'"):
        grouped_logprobs(model, prompts, completions, (1, 1), micro_batch_size=2)


@pytest.mark.parametrize(
    ("family", "modality"),
    [("smolvlm", "image"), ("internvl", "image"), ("gemma3", "image"), ("glm4v", "image"), ("glm4v", "video"),
     ("glm46v", "video"),
     ("llava_onevision", "image"),
     ("qwen2_audio", "audio"), ("qwen3_vl", "image"), ("qwen3_vl_moe", "video"), ("qwen3_5", "image"),
     ("qwen2_5_omni_thinker", "image"), ("qwen2_5_omni_thinker", "audio"),
     ("qwen3_omni_moe_thinker", "image"), ("qwen3_omni_moe_thinker", "audio")],
)
def test_feature_token_formulas_match_processor_expansion(family, modality, load_tiny, media_samples) -> None:
    """Each family adapter's features -> tokens formula agrees with what its processor wrote."""
    _, processor = load_tiny(family)
    batch = build_prompt_batch(processor, media_samples(family, modality), family=family)  # runs the check
    adapter = adapter_for(family)
    inputs = {**batch.model_inputs(), **batch.media_inputs}  # with the adapter's layout inputs
    expected = adapter.expected_media_tokens(processor, inputs, batch.media_counts)
    for modality, token_id in adapter.placeholder_token_ids(processor).items():
        found = (batch.input_ids == token_id).sum(-1).tolist()
        assert [row.get(modality, 0) for row in expected] == found
    assert all(sum(row.values()) > 0 for row in expected)



def test_internvl_rows_get_their_own_tiles(load_tiny, media_samples) -> None:
    """The tiny InternVL tiles images by aspect ratio as real checkpoints do; a selected row holds exactly the
    tiles of its images (split by the adapter's ``image_tiles``, which never reaches the forward)."""
    _, processor = load_tiny("internvl")
    samples = media_samples("internvl")
    batch = build_prompt_batch(processor, samples, family="internvl")
    tiles = batch.media_inputs["image_tiles"][:, 0].tolist()  # [images]
    assert len(set(tiles)) > 1 and max(tiles) > 1 and batch.media_inputs["pixel_values"].shape[0] == sum(tiles)
    assert "image_tiles" not in batch.model_inputs()
    for row in (2, 0, 1):
        alone = build_prompt_batch(processor, [samples[row]], family="internvl")
        assert torch.equal(batch.select([row]).media_inputs["pixel_values"], alone.media_inputs["pixel_values"])
