"""Batch building: left-padded prompts, prompt + completion rows, row selection, over-long drops."""

from __future__ import annotations

import torch

from mmgrpo.models.batch import PROMPT_TOO_LONG, build_prompt_batch
from mmgrpo.models.train_batch import build_train_batch, pad_completions
from mmgrpo.skipped_rows import SkippedRow
from mmgrpo.types import Sample
from processors import MissingMediaError


def test_prompts_are_left_padded_with_media_counted(load_tiny, media_samples) -> None:
    model, processor = load_tiny("qwen2_5_vl")
    samples = media_samples("qwen2_5_vl")
    batch = build_prompt_batch(processor, samples, family="qwen2_5_vl")

    lengths = batch.attention_mask.sum(-1)
    assert len(set(lengths.tolist())) == 3  # three different prompt lengths
    assert batch.attention_mask[:, -1].all()  # every prompt ends in the last column
    for row, length in enumerate(lengths.tolist()):
        padding = batch.input_ids.shape[1] - length
        assert not batch.attention_mask[row, :padding].any()
        assert (batch.input_ids[row, :padding] == batch.pad_token_id).all()
        alone = build_prompt_batch(processor, [samples[row]], family="qwen2_5_vl")
        assert torch.equal(batch.input_ids[row, padding:], alone.input_ids[0])
    assert batch.media_counts == [{"image": 1}] * 3
    assert batch.token_inputs.keys() == {"mm_token_type_ids"}
    assert batch.media_inputs["image_grid_thw"].shape == (3, 3)
    assert batch.sample_ids == [s.id for s in samples] and batch.kept == [0, 1, 2] and batch.dropped == []


def test_select_rows_equals_building_those_rows(load_tiny, media_samples) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    samples = media_samples("qwen2_5_vl")
    batch = build_prompt_batch(processor, samples, family="qwen2_5_vl")
    selected = batch.select([2, 0, 2])
    direct = build_prompt_batch(processor, [samples[2], samples[0], samples[2]], family="qwen2_5_vl")
    for key, value in direct.model_inputs().items():
        assert torch.equal(selected.model_inputs()[key], value), key
    assert selected.sample_ids == direct.sample_ids and selected.kept == [2, 0, 2]


def test_overlong_prompts_are_dropped_and_counted_never_truncated(load_tiny, media_samples) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    samples = media_samples("qwen2_5_vl")
    lengths = build_prompt_batch(processor, samples, family="qwen2_5_vl").attention_mask.sum(-1).tolist()
    limit = sorted(lengths)[1]  # keeps the two shortest prompts, drops the longest
    longest = lengths.index(max(lengths))

    batch = build_prompt_batch(processor, samples, family="qwen2_5_vl", max_prompt_len=limit)

    assert [(row.row_id, row.reason) for row in batch.dropped] == [(samples[longest].id, PROMPT_TOO_LONG)]
    assert batch.kept == [row for row in range(3) if row != longest]
    assert batch.input_ids.shape[1] == limit  # the dropped row's padding is trimmed too
    kept_alone = build_prompt_batch(processor, [samples[batch.kept[0]]], family="qwen2_5_vl")
    assert torch.equal(batch.select([0]).input_ids, kept_alone.input_ids)  # intact, not truncated
    nothing_left = build_prompt_batch(processor, samples, family="qwen2_5_vl", max_prompt_len=1)
    assert len(nothing_left) == 0 and nothing_left.kept == []
    assert [row.row_id for row in nothing_left.dropped] == [sample.id for sample in samples]


def test_train_batch_concatenates_prompt_and_completion(load_tiny, media_samples) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    first, second, _ = media_samples("qwen2_5_vl")
    completions = [[5, 6, 7], [8], [9, 10]]
    batch = build_train_batch(processor, [first, first, second], completions, family="qwen2_5_vl")

    assert batch.completion_mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert batch.completion_ids[0].tolist() == [5, 6, 7]
    assert batch.prompt.media_inputs["image_grid_thw"].shape[0] == 3  # one image per row
    inputs = batch.model_inputs()
    prompt_length = batch.prompt_length
    assert inputs["input_ids"].shape == (3, prompt_length + 3)
    assert torch.equal(inputs["input_ids"][:, prompt_length:], batch.completion_ids)
    assert torch.equal(inputs["attention_mask"][:, prompt_length:], batch.completion_mask)
    assert not inputs["mm_token_type_ids"][:, prompt_length:].any()  # completions are text
    assert inputs["mm_token_type_ids"][:, :prompt_length].any()


def test_completions_of_dropped_prompts_are_left_out(load_tiny, media_samples) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    samples = media_samples("qwen2_5_vl")
    lengths = build_prompt_batch(processor, samples, family="qwen2_5_vl").attention_mask.sum(-1).tolist()
    longest = samples[lengths.index(max(lengths))]
    short = samples[lengths.index(min(lengths))]
    batch = build_train_batch(
        processor, [longest, short, longest], [[1], [2, 3], [4]], family="qwen2_5_vl", max_prompt_len=max(lengths) - 1
    )
    assert batch.kept == [1] and batch.num_dropped == 2
    assert batch.prompt.sample_ids == [short.id] and batch.completion_ids.tolist() == [[2, 3]]


def test_audio_batch_has_features_per_clip(load_tiny, media_samples) -> None:
    _, processor = load_tiny("qwen2_audio")
    samples = media_samples("qwen2_audio")
    batch = build_prompt_batch(processor, samples, family="qwen2_audio")
    assert batch.media_inputs["input_features"].shape[0] == 3
    assert batch.media_counts == [{"audio": 1}] * 3
    reordered = batch.select([1])
    assert torch.equal(reordered.media_inputs["input_features"], batch.media_inputs["input_features"][1:2])


def test_unloadable_media_is_skipped_naming_file(load_tiny, tmp_path) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    missing = str(tmp_path / "nowhere.png")
    content = [{"type": "image", "image": missing}, {"type": "text", "text": "How many?"}]
    sample = Sample(id="bad", task="test", messages=[{"role": "user", "content": content}])
    batch = build_prompt_batch(processor, [sample], family="qwen2_5_vl")
    assert len(batch) == 0
    assert batch.dropped == [SkippedRow("bad", missing, MissingMediaError.category, "file does not exist")]


def test_pad_completions() -> None:
    ids, mask = pad_completions([[4, 5], [], [6]], pad_token_id=0)
    assert ids.tolist() == [[4, 5], [0, 0], [6, 0]]
    assert mask.tolist() == [[1, 1], [0, 0], [1, 0]]
