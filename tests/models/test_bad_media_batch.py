"""The batch builder leaves out each sample it cannot encode, names it, and encodes the rest."""

from __future__ import annotations

import torch

from mmgrpo.models.batch import PLACEHOLDER_MISMATCH, PROMPT_TOO_LONG, build_prompt_batch
from mmgrpo.types import Sample
from processors import ImageBudget

from .conftest import one_media_sample

FAMILY = "qwen2_5_vl"
# The config's default image budget (model.min_pixels / max_pixels).
BUDGETS = {"image": ImageBudget(min_pixels=56 * 56, max_pixels=112 * 112)}


def image_sample(sample_id: str, path: object, question: str = "How many?") -> Sample:
    content = [{"type": "image", "image": str(path)}, {"type": "text", "text": question}]
    return Sample(id=sample_id, task="clevr_count", messages=[{"role": "user", "content": content}])


def test_bad_media_are_skipped_named_and_the_rest_encoded_intact(load_tiny, media_samples, bad_images):
    _, processor = load_tiny(FAMILY)
    good_first, good_last = media_samples(FAMILY)[0], media_samples(FAMILY)[2]
    bad = [image_sample(name, bad_images[name]) for name in ("truncated_jpeg", "corrupt_png", "tall", "wide")]
    samples = [good_first, *bad, good_last]

    batch = build_prompt_batch(processor, samples, BUDGETS, family=FAMILY)

    assert batch.kept == [0, 5] and batch.sample_ids == [good_first.id, good_last.id]
    named = {row.row_id: (row.reason, row.source) for row in batch.dropped}
    assert named == {
        "truncated_jpeg": ("corrupt media", str(bad_images["truncated_jpeg"])),
        "corrupt_png": ("corrupt media", str(bad_images["corrupt_png"])),
        "tall": ("bad media shape", str(bad_images["tall"])),
        "wide": ("bad media shape", str(bad_images["wide"])),
    }
    alone = build_prompt_batch(processor, [good_first, good_last], BUDGETS, family=FAMILY)
    for key, value in alone.model_inputs().items():
        assert torch.equal(batch.model_inputs()[key], value), key


def test_a_batch_of_only_bad_or_overlong_samples_has_zero_rows(load_tiny, media_samples, bad_images):
    _, processor = load_tiny(FAMILY)
    overlong = media_samples(FAMILY)[2]
    batch = build_prompt_batch(
        processor, [image_sample("cut", bad_images["truncated_jpeg"]), overlong], BUDGETS, family=FAMILY,
        max_prompt_len=3,
    )
    assert len(batch) == 0 and batch.kept == [] and batch.sample_ids == []
    assert [(row.row_id, row.reason) for row in batch.dropped] == [("cut", "corrupt media"), (overlong.id, PROMPT_TOO_LONG)]
    assert "> max_prompt_len=3" in batch.dropped[1].detail


def test_a_row_whose_text_and_media_disagree_is_skipped(load_tiny, media_samples):
    _, processor = load_tiny(FAMILY)
    good = media_samples(FAMILY)[0]
    no_image = Sample(id="text-only", task="clevr_count", messages=[
        {"role": "user", "content": [{"type": "text", "text": "<|vision_start|><|image_pad|><|vision_end|>How many?"}]},
    ])
    batch = build_prompt_batch(processor, [no_image, good], family=FAMILY)
    assert batch.kept == [1]
    assert [(row.row_id, row.reason) for row in batch.dropped] == [("text-only", PLACEHOLDER_MISMATCH)]


def test_nonfinite_audio_and_processor_outputs_are_skipped_named_and_the_rest_encoded(
    load_tiny, media_samples, nonfinite_media
):
    family = "qwen2_audio"
    _, processor = load_tiny(family)
    good_first, good_last = media_samples(family)[0], media_samples(family)[1]
    bad = [one_media_sample(name, "audio", str(nonfinite_media[name]), "How many?")
           for name in ("nan_wav", "inf_wav", "loud_wav")]

    batch = build_prompt_batch(processor, [good_first, *bad, good_last], family=family)

    assert batch.kept == [0, 4] and batch.sample_ids == [good_first.id, good_last.id]
    named = {row.row_id: (row.reason, row.source) for row in batch.dropped}
    assert named == {name: ("non-finite media", str(nonfinite_media[name])) for name in ("nan_wav", "inf_wav", "loud_wav")}
    loud = next(row for row in batch.dropped if row.row_id == "loud_wav")
    assert "input_features" in loud.detail  # decoded fine; the feature extractor made it NaN
    assert all(torch.isfinite(value).all() for value in batch.media_inputs.values() if value.is_floating_point())
    alone = build_prompt_batch(processor, [good_first, good_last], family=family)
    for key, value in alone.model_inputs().items():
        assert torch.equal(batch.model_inputs()[key], value), key


def test_a_float_image_with_nan_is_skipped_as_nonfinite(load_tiny, media_samples, nonfinite_media):
    _, processor = load_tiny(FAMILY)
    good = media_samples(FAMILY)[0]
    batch = build_prompt_batch(
        processor, [image_sample("nan", nonfinite_media["nan_tiff"]), good], BUDGETS, family=FAMILY
    )
    assert batch.sample_ids == [good.id]
    assert [(row.row_id, row.reason) for row in batch.dropped] == [("nan", "non-finite media")]
