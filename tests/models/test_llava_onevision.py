"""LLaVA-OneVision's prompt format, its media token formula against the model's own features (anyres tiles
unpadded and downsampled, several images in a row, pooled video frames), and a tiny policy that sees its media
(the family tests run it with the others)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from mmgrpo.models.adapters import adapter_for
from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.prompt_cache import PromptCache
from mmgrpo.models.tiny.llava_onevision import TILE_SIDE
from mmgrpo.types import Sample
from tests.models.conftest import one_media_sample
from tests.models.test_prompt_cache import LARGE, assert_same_inputs

FAMILY = "llava_onevision"
# (height, width): a wide and a tall grid unpadded, square grids (4 x 4 tiles, downsampled, with 16 tiles).
IMAGE_SIZES = ((42, 42), (30, 200), (200, 30), (84, 140), (112, 112), (168, 168))
SIXTEEN_TILES = {"max_pixels": 16 * TILE_SIDE**2}
# A 4 x 4 grid's 12 x 12 tokens are more than 9 tiles' worth by sqrt(144 / 81): downsampled to 9 x 9 (+ a newline per
# row) after the base tile's 3 x 3.
DOWNSAMPLED_TOKENS = 9 + 9 * (9 + 1)


def image_sample(sample_id: str, *sizes: tuple[int, int], seed: int = 0) -> Sample:
    """One user turn with a random image of each of ``sizes`` and a question."""
    rng = np.random.default_rng(seed)
    images = [{"type": "image", "image": Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8))}
              for size in sizes]
    return Sample(id=sample_id, task="test", messages=[
        {"role": "user", "content": [*images, {"type": "text", "text": "How many?"}]}])


def feature_lengths(model, batch) -> dict[str, list[int]]:
    """Features the model's own forward makes for each image and video of ``batch`` (per item)."""
    inputs = batch.adapter.forward_media(batch.media_inputs)
    backbone = model.model
    lengths = {}
    with torch.no_grad():
        if "pixel_values" in inputs:
            images = backbone.get_image_features(inputs["pixel_values"], inputs["image_sizes"],
                                                 batch_num_images=inputs["batch_num_images"])
            lengths["image"] = [len(features) for features in images.pooler_output]
        if "pixel_values_videos" in inputs:
            videos = backbone.get_video_features(inputs["pixel_values_videos"]).pooler_output  # [videos, T, D]
            lengths["video"] = [videos.shape[1]] * videos.shape[0]
    return lengths


def test_the_prompt_is_chatml_with_media_before_the_text(load_tiny) -> None:
    _, processor = load_tiny(FAMILY)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [
        {"type": "text", "text": "Count."}, {"type": "video"}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system \nBe brief.<|im_end|>\n<|im_start|>user <image><video>\nCount.<|im_end|>\n"
                    "<|im_start|>assistant\n")


@pytest.mark.parametrize("options", [{}, SIXTEEN_TILES], ids=["default", "sixteen-tiles"])
def test_image_tokens_follow_the_models_features(options, tiny_model_dir) -> None:
    """Each image alone in its row (anyres: base tile + unpadded grid + newlines, downsampled past
    ``anyres_max_9``), and a row of several images (a tile and a newline each): the adapter's count is what the
    processor wrote and what the model's forward fills."""
    model, processor = load_model_and_processor(tiny_model_dir(FAMILY, **options), dtype="float32")
    samples = [image_sample(f"one-{i}", size, seed=i) for i, size in enumerate(IMAGE_SIZES)]
    samples.append(image_sample("three", *IMAGE_SIZES[:3]))
    batch = build_prompt_batch(processor, samples, family=FAMILY)  # raises if the processor disagrees
    expected = adapter_for(FAMILY).expected_media_tokens(processor, {**batch.model_inputs(), **batch.media_inputs},
                                                         batch.media_counts)
    per_image = feature_lengths(model, batch)["image"]
    assert [row["image"] for row in expected] == [*per_image[: len(IMAGE_SIZES)], sum(per_image[len(IMAGE_SIZES):])]
    assert per_image[len(IMAGE_SIZES):] == [processor.num_image_tokens + 1] * 3
    assert len(set(per_image[: len(IMAGE_SIZES)])) >= 3  # the grids and their unpadding differ
    assert batch.media_inputs["pixel_values"].shape[1] > 2  # some image was tiled
    if options:
        assert per_image[len(IMAGE_SIZES) - 1] == DOWNSAMPLED_TOKENS


def test_video_tokens_are_pooled_frames_and_a_newline(load_tiny, video_sample, video_budgets) -> None:
    model, processor = load_tiny(FAMILY)
    batch = build_prompt_batch(processor, [video_sample, video_sample], video_budgets, family=FAMILY)
    expected = adapter_for(FAMILY).expected_media_tokens(processor, batch.media_inputs, batch.media_counts)
    frames = batch.media_inputs["pixel_values_videos"].shape[1]
    assert [row["video"] for row in expected] == feature_lengths(model, batch)["video"]
    assert expected[0]["video"] == frames * 2 * 2 + 1  # 3 x 3 patches pooled to 2 x 2


def test_rows_cached_from_batches_of_different_tile_counts_batch_together(load_tiny, tmp_path) -> None:
    """A row keeps its tiles zero-padded to its own batch's most: rows encoded apart are padded alike when
    batched from the preprocessing cache, and encode exactly as a fresh batch."""
    _, processor = load_tiny(FAMILY)
    wide, square = image_sample("wide", (30, 200)), image_sample("square", (112, 112))  # 1 x 5 and 2 x 2 tiles
    cache = PromptCache(tmp_path, LARGE)
    alone = [build_prompt_batch(processor, [sample], family=FAMILY, cache=cache) for sample in (wide, square)]
    assert alone[0].media_inputs["pixel_values"].shape[1] != alone[1].media_inputs["pixel_values"].shape[1]
    warm = build_prompt_batch(processor, [square, wide], family=FAMILY, cache=cache)
    assert cache.stats.hits == 2
    assert_same_inputs(warm, build_prompt_batch(processor, [square, wide], family=FAMILY))


@pytest.mark.parametrize("modality", ["image", "video"])
def test_the_tiny_policy_sees_its_media(modality, load_tiny, video_budgets) -> None:
    """Two different images (or videos) under one question give different next-token distributions: the projector
    starts random, so the media reach the language model (transformers' init would do so too; a family whose
    projector started at zero learned nothing)."""
    model, processor = load_tiny(FAMILY)
    rng = np.random.default_rng(0)
    shape = (4, 56, 84, 3) if modality == "video" else (84, 140, 3)
    samples = [one_media_sample(f"{modality}-{i}", modality, rng.integers(0, 256, shape, dtype=np.uint8), "How many?")
               for i in range(2)]
    batch = build_prompt_batch(processor, samples, video_budgets, family=FAMILY)
    with torch.no_grad():
        last = model(**batch.model_inputs()).logits[:, -1].log_softmax(-1)  # [2, V]
    assert (last[0] - last[1]).abs().max() > 1e-2
