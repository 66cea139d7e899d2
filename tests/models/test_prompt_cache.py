"""Preprocessing cache: cached prompts encode exactly as fresh ones, keys follow content, entries
survive concurrency and damage, the folder keeps to its cap."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.train_batch import attach_completions
from mmgrpo.models.logprobs import sequence_logprobs
from mmgrpo.models.prompt_cache import PromptCache
from processors import ImageBudget, VideoSpan
from tests.models.conftest import one_media_sample

LARGE = 1 << 40


def assert_same_inputs(cached, fresh) -> None:
    assert cached.sample_ids == fresh.sample_ids and cached.kept == fresh.kept
    assert cached.media_counts == fresh.media_counts
    got, want = cached.model_inputs(), fresh.model_inputs()
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(got[key], value), key


@pytest.mark.parametrize(
    "family",
    ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "internvl", "gemma3", "glm4v", "llava_onevision", "qwen2_audio",
     "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"],
)
def test_cached_batches_equal_fresh_ones(family, load_tiny, media_samples, tmp_path) -> None:
    _, processor = load_tiny(family)
    samples = media_samples(family)
    cache = PromptCache(tmp_path, LARGE)
    fresh = build_prompt_batch(processor, samples, family=family)

    cold = build_prompt_batch(processor, samples, family=family, cache=cache)
    assert (cache.stats.hits, cache.stats.misses, cache.stats.stored) == (0, 3, 3)
    reordered = [samples[2], samples[0], samples[1]]
    warm = build_prompt_batch(processor, reordered, family=family, cache=cache)
    assert (cache.stats.hits, cache.stats.misses) == (3, 3)

    assert_same_inputs(cold, fresh)
    assert_same_inputs(warm, build_prompt_batch(processor, reordered, family=family))
    assert warm.prepared == []  # built from the cache: no loaded media to hand an engine


def test_cached_video_prompt_equals_fresh(load_tiny, video_sample, video_budgets, media_samples, tmp_path) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    samples = [video_sample, media_samples("qwen2_5_vl")[0]]  # a video row and an image row
    cache = PromptCache(tmp_path, LARGE)
    fresh = build_prompt_batch(processor, samples, video_budgets, family="qwen2_5_vl")
    build_prompt_batch(processor, samples, video_budgets, family="qwen2_5_vl", cache=cache)
    warm = build_prompt_batch(processor, samples, video_budgets, family="qwen2_5_vl", cache=cache)
    assert cache.stats.hits == 2
    assert_same_inputs(warm, fresh)


def test_two_windows_of_one_video_are_two_entries(load_tiny, video_sample, video_budgets, tmp_path) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    (frames,) = video_sample.media("video")  # 8 frames, played at the budget's 2 fps: 4 s
    question = video_sample.user_text()
    windows = [one_media_sample(f"w{start}", "video", VideoSpan(frames, start, start + 1.5), question)
               for start in (0.0, 2.0)]
    cache = PromptCache(tmp_path, LARGE)
    keys = [cache.key(processor, sample, video_budgets, "qwen2_5_vl") for sample in [video_sample, *windows]]
    assert len(set(keys)) == 3
    build_prompt_batch(processor, windows, video_budgets, family="qwen2_5_vl", cache=cache)
    warm = build_prompt_batch(processor, windows, video_budgets, family="qwen2_5_vl", cache=cache)
    assert (cache.stats.stored, cache.stats.hits) == (2, 2)
    fresh = build_prompt_batch(processor, windows, video_budgets, family="qwen2_5_vl")
    assert_same_inputs(warm, fresh)
    first, second = fresh.model_inputs()["pixel_values_videos"].chunk(2)
    assert not torch.equal(first, second)  # each entry holds its own window's frames


def test_tiled_family_from_cache_scores_like_fresh(load_tiny, media_samples, tmp_path) -> None:
    """SmolVLM pads each row's tiles to the batch's most: a cached batch may pad differently, never score differently."""
    model, processor = load_tiny("smolvlm")
    samples = media_samples("smolvlm")
    cache = PromptCache(tmp_path, LARGE)
    for sample in samples:  # cached one by one: each row padded to its own tile count
        build_prompt_batch(processor, [sample], family="smolvlm", cache=cache)
    warm = build_prompt_batch(processor, samples, family="smolvlm", cache=cache)
    fresh = build_prompt_batch(processor, samples, family="smolvlm")
    assert cache.stats.hits == 3
    assert torch.equal(warm.input_ids, fresh.input_ids)
    completions = [[5, 6, 7]] * 3
    with torch.no_grad():
        got, _ = sequence_logprobs(model, attach_completions(warm, completions, [0, 1, 2]), micro_batch_size=3)
        want, _ = sequence_logprobs(model, attach_completions(fresh, completions, [0, 1, 2]), micro_batch_size=3)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_key_follows_content_budget_text_and_processor(load_tiny, media_samples, tmp_path) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    sample = media_samples("qwen2_5_vl")[0]
    cache = PromptCache(tmp_path, LARGE)
    key = cache.key(processor, sample, {}, "qwen2_5_vl")
    path = Path(sample.media("image")[0])

    copy = tmp_path / "elsewhere.png"
    copy.write_bytes(path.read_bytes())
    moved = one_media_sample("other-id", "image", str(copy), sample.messages[0]["content"][1]["text"])
    assert cache.key(processor, moved, {}, "qwen2_5_vl") == key  # same bytes, other path and id: same entry

    changed = tmp_path / "changed.png"
    pixels = np.asarray(Image.open(path)).copy()
    pixels[0, 0] ^= 1
    Image.fromarray(pixels).save(changed)
    other_pixels = one_media_sample("x", "image", str(changed), sample.messages[0]["content"][1]["text"])
    other_text = one_media_sample("x", "image", str(path), "a different question")
    small = {"image": ImageBudget(max_pixels=28 * 28 * 4)}
    keys = {
        cache.key(processor, other_pixels, {}, "qwen2_5_vl"),
        cache.key(processor, other_text, {}, "qwen2_5_vl"),
        cache.key(processor, sample, small, "qwen2_5_vl"),
        cache.key(processor, sample, {}, "qwen2_vl"),
    }
    assert len(keys) == 4 and key not in keys

    changed_processor = load_tiny("qwen2_5_vl")[1].__class__.from_pretrained(processor.tokenizer.name_or_path)
    changed_processor.image_processor.image_mean = [0.0, 0.0, 0.0]
    assert PromptCache(tmp_path, LARGE).key(changed_processor, sample, {}, "qwen2_5_vl") != key


def test_in_memory_media_are_cached_and_unhashable_ones_are_not(load_tiny, tmp_path) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    pixels = np.random.default_rng(0).integers(0, 256, (56, 56, 3), dtype=np.uint8)
    as_array = one_media_sample("a", "image", pixels, "Count")
    as_pil = one_media_sample("b", "image", Image.fromarray(pixels), "Count")
    unhashable = one_media_sample("c", "image", str(tmp_path / "missing.png"), "Count")
    keys = PromptCache(tmp_path, LARGE)
    assert keys.key(processor, as_array, {}, "qwen2_5_vl") != keys.key(processor, as_pil, {}, "qwen2_5_vl")
    assert keys.key(processor, unhashable, {}, "qwen2_5_vl") is None
    cache = PromptCache(tmp_path, LARGE)
    batch = build_prompt_batch(processor, [as_array, unhashable, as_array], family="qwen2_5_vl", cache=cache)
    assert batch.kept == [0, 2] and [row.row_id for row in batch.dropped] == ["c"]  # the loader reports it
    assert cache.stats.uncacheable == 1 and cache.stats.stored == 2


def test_damaged_entry_is_a_miss_and_is_replaced(load_tiny, media_samples, tmp_path) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    sample = media_samples("qwen2_5_vl")[0]
    cache = PromptCache(tmp_path, LARGE)
    build_prompt_batch(processor, [sample], family="qwen2_5_vl", cache=cache)
    (entry,) = tmp_path.glob("v*/*/*.safetensors")
    entry.write_bytes(entry.read_bytes()[:100])  # truncated, as a full disk or a crash of a foreign tool leaves it

    batch = build_prompt_batch(processor, [sample], family="qwen2_5_vl", cache=cache)

    assert cache.stats.errors == 1 and cache.stats.hits == 0 and cache.stats.stored == 2
    assert_same_inputs(batch, build_prompt_batch(processor, [sample], family="qwen2_5_vl"))
    build_prompt_batch(processor, [sample], family="qwen2_5_vl", cache=cache)
    assert cache.stats.hits == 1  # the entry was written anew


def test_unwritable_folder_only_disables_storing(load_tiny, media_samples, tmp_path) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = PromptCache(blocker / "cache", LARGE)
    samples = media_samples("qwen2_5_vl")
    batch = build_prompt_batch(processor, samples, family="qwen2_5_vl", cache=cache)
    assert len(batch) == 3 and cache.stats.stored == 0 and cache.stats.errors == 3  # each write failed


def test_least_recently_used_entries_are_evicted_past_the_cap(load_tiny, media_samples, tmp_path) -> None:
    _, processor = load_tiny("qwen2_5_vl")
    first, second, third = media_samples("qwen2_5_vl")
    probe = PromptCache(tmp_path / "probe", LARGE)
    build_prompt_batch(processor, [first, second, third], family="qwen2_5_vl", cache=probe)
    sizes = sorted(entry.stat().st_size for entry in (tmp_path / "probe").glob("v*/*/*.safetensors"))

    cache = PromptCache(tmp_path / "capped", max_bytes=sum(sizes[:2]) + sizes[2] // 2)  # room for two entries
    build_prompt_batch(processor, [first], family="qwen2_5_vl", cache=cache)
    build_prompt_batch(processor, [second], family="qwen2_5_vl", cache=cache)
    old = time.time() - 60
    for entry in (tmp_path / "capped").glob("v*/*/*.safetensors"):
        os.utime(entry, (old, old))
    build_prompt_batch(processor, [first], family="qwen2_5_vl", cache=cache)  # a hit: first is used again
    build_prompt_batch(processor, [third], family="qwen2_5_vl", cache=cache)  # over the cap: second goes

    assert cache.stats.evicted >= 1 and cache.size_bytes() <= cache.max_bytes
    hits = cache.stats.hits
    build_prompt_batch(processor, [first], family="qwen2_5_vl", cache=cache)
    assert cache.stats.hits == hits + 1
    build_prompt_batch(processor, [second], family="qwen2_5_vl", cache=cache)
    assert cache.stats.hits == hits + 1  # evicted: encoded anew


def _read_and_write(model_dir: str, image: str, root: str, rounds: int, queue) -> None:
    from mmgrpo.models.loading import load_processor

    processor = load_processor(model_dir)
    cache = PromptCache(root, LARGE)
    sample = one_media_sample("s", "image", image, "Count")
    key = cache.key(processor, sample, {}, "qwen2_5_vl")
    seen = []
    for _ in range(rounds):
        batch = build_prompt_batch(processor, [sample], family="qwen2_5_vl", cache=cache)
        seen.append(batch.input_ids.tolist())
        cache.put(key, batch.rows()[0])  # rewrite the entry while the others read it
    queue.put((cache.stats.errors, seen))


def test_concurrent_writers_and_readers_never_see_a_partial_entry(tiny_qwen25vl, media_samples, tmp_path) -> None:
    image = media_samples("qwen2_5_vl")[0].media("image")[0]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(target=_read_and_write, args=(str(tiny_qwen25vl), image, str(tmp_path), 40, queue))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert all(worker.exitcode == 0 for worker in workers)
    assert [errors for errors, _ in results] == [0, 0, 0]
    first = results[0][1][0]
    assert all(ids == first for _, seen in results for ids in seen)
    assert not list(tmp_path.glob("v*/*/*.tmp"))  # no temporary file left behind


def test_stats_count_hits_per_lookup(tmp_path) -> None:
    cache = PromptCache(tmp_path, LARGE)
    before = cache.stats.snapshot()
    cache.stats.hits, cache.stats.misses, cache.stats.uncacheable = 3, 1, 0
    step = cache.stats.since(before)
    assert step.lookups == 4 and step.hit_rate() == 0.75
    assert PromptCache(tmp_path, LARGE).stats.hit_rate() is None


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_audio", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"])
def test_a_16_bit_model_reads_media_stored_in_its_dtype_and_computes_the_same(family, tiny_model_dir, media_samples,
                                                                                tmp_path) -> None:
    from safetensors.torch import load_file

    from mmgrpo.models.loading import load_model_and_processor

    model, processor = load_model_and_processor(tiny_model_dir(family), dtype="bfloat16")
    samples = media_samples(family)
    cache = PromptCache(tmp_path, LARGE, media_dtype=torch.bfloat16)
    fresh = build_prompt_batch(processor, samples, family=family, cache=cache)  # misses: encoded, stored in bf16
    warm = build_prompt_batch(processor, samples, family=family, cache=cache)
    assert cache.stats.hits == 3
    stored = load_file(str(next(tmp_path.rglob("*.safetensors"))))
    floats = [value.dtype for name, value in stored.items() if name.startswith("media.") and value.is_floating_point()]
    assert floats and set(floats) == {torch.bfloat16}  # half the bytes of float32
    assert fresh.model_inputs().keys() == warm.model_inputs().keys()
    completions = [[5, 6, 7]] * 3
    with torch.no_grad():
        got, _ = sequence_logprobs(model.eval(), attach_completions(warm, completions, [0, 1, 2]), micro_batch_size=3)
        want, _ = sequence_logprobs(model, attach_completions(fresh, completions, [0, 1, 2]), micro_batch_size=3)
    assert torch.equal(got, want)  # the model casts its media to bf16 on entry either way
    assert PromptCache(tmp_path, LARGE).key(processor, samples[0], {}, family) != cache.key(processor, samples[0], {},
                                                                                             family)


def test_the_config_stores_media_in_a_16_bit_models_dtype_only(tmp_path) -> None:
    from mmgrpo.config import load_config
    from mmgrpo.models.prompt_cache import open_prompt_cache

    def media_dtype(model_dtype: str) -> torch.dtype | None:
        return open_prompt_cache(load_config(None, [f"model.dtype={model_dtype}", f"data.cache_dir={tmp_path}"])).media_dtype

    assert media_dtype("bfloat16") == torch.bfloat16 and media_dtype("float16") == torch.float16
    assert media_dtype("float32") is None and media_dtype("auto") is None  # never stored lossily
