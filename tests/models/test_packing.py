"""Padding-free (packed) log-probs and gradients equal the padded path's, for every tiny family (the per-sample
path's against one unbatched HF forward: ``test_logprobs.py``)."""

from __future__ import annotations

import copy

import pytest
import torch

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.logprobs import sequence_logprobs
from mmgrpo.config import ConfigError, load_config
from mmgrpo.models import packing
from mmgrpo.models.packing import attention_mask_for, first_fit_bins
from mmgrpo.models.shared_prefix import completion_logprobs
from mmgrpo.models.tiny import TINY_FAMILIES
from mmgrpo.models.train_batch import build_train_batch
from tests.models.conftest import LINEAR_ATTENTION_FAMILIES
from tests.models.test_logprobs import ATOL, PROMPT_OF, random_completions


def test_first_fit_bins_fills_rows_longest_first() -> None:
    assert first_fit_bins([5, 1, 9, 3, 2, 7], capacity=10) == [[1, 2], [3, 5], [0, 4]]  # 9+1, 7+3, 5+2
    assert first_fit_bins([12, 4], capacity=10) == [[0], [1]]  # a longer item gets a row of its own
    assert first_fit_bins([], capacity=10) == []


@pytest.mark.parametrize("attention", ["sdpa", "flash_attention_2"])
def test_packed_forward_needs_fewer_rows_and_no_padding_rows(attention, load_tiny, media_samples, monkeypatch) -> None:
    """Long-tailed completions: the short rows share a row of the packed forward (sdpa: rows no wider than the
    widest sequence; flash attention: everything in one row, which SDPA also reads from the positions)."""
    model, processor = load_tiny("qwen2_5_vl")
    monkeypatch.setattr(packing, "text_attention", lambda config: attention)
    samples = [media_samples("qwen2_5_vl")[p] for p in PROMPT_OF]
    completions = random_completions((60, 1, 3, 2))
    batch = build_train_batch(processor, samples, completions, family="qwen2_5_vl")
    shapes = []
    hook = model.model.language_model.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["inputs_embeds"].shape[:2])), with_kwargs=True
    )
    try:
        with torch.no_grad():
            packed, _ = sequence_logprobs(model, batch, micro_batch_size=len(samples), padding_free=True)
            padded, _ = sequence_logprobs(model, batch, micro_batch_size=len(samples))
    finally:
        hook.remove()
    real_tokens = int(batch.prompt.attention_mask.sum() + batch.completion_mask.sum())
    (rows, width), padded_shape = shapes
    assert padded_shape == (4, batch.prompt_length + 60)
    if attention == "sdpa":  # the three short rows fit in two rows as wide as the long one
        assert rows == 3 and real_tokens <= rows * width and width <= padded_shape[1]
    else:
        assert (rows, width) == (1, real_tokens)
    torch.testing.assert_close(packed, padded, atol=ATOL, rtol=0)


def test_packed_gradients_equal_padded(load_tiny, media_samples) -> None:
    model, processor = load_tiny("qwen2_5_vl")
    samples = [media_samples("qwen2_5_vl")[p] for p in PROMPT_OF]
    batch = build_train_batch(processor, samples, random_completions(), family="qwen2_5_vl")
    gradients = []
    for padding_free in (False, True):
        model.zero_grad(set_to_none=True)
        logp, _ = sequence_logprobs(model, batch, micro_batch_size=2, padding_free=padding_free)
        (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
        gradients.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    model.zero_grad(set_to_none=True)
    assert gradients[0].keys() == gradients[1].keys() and any(".visual." in f".{n}" for n in gradients[0])
    for name, padded in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], padded, atol=1e-5, rtol=1e-4, msg=name)


def test_packed_video_beside_image(load_tiny, media_samples, video_sample, video_budgets, reference) -> None:
    model, processor = load_tiny("qwen2_5_vl")
    samples = [video_sample, media_samples("qwen2_5_vl")[0], video_sample]
    completions = random_completions((4, 2, 5))
    batch = build_train_batch(processor, samples, completions, video_budgets, family="qwen2_5_vl")
    with torch.no_grad():
        packed, _ = sequence_logprobs(model, batch, micro_batch_size=3, padding_free=True, statistic="entropy")
    for row, (sample, completion) in enumerate(zip(samples, completions)):
        expected = reference(model, processor, sample, completion, video_budgets)
        torch.testing.assert_close(packed[row, : len(completion)], expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", TINY_FAMILIES.names())
def test_group_shared_packed_logprobs_equal_padded(family, load_tiny, media_samples) -> None:
    """Each prompt encoded once, its group's completions packed into one row behind it: the padded path's
    log-probs, for groups of different sizes and completions of one token."""
    model, processor = load_tiny(family)
    prompts = build_prompt_batch(processor, media_samples(family), family=model.config.model_type)
    group_sizes = [3, 1, 2]
    completions = random_completions((6, 2, 3, 4, 1, 7))  # bins: prompt 0 packs its 6 and its 2 in one row
    if family in LINEAR_ATTENTION_FAMILIES:  # a recurrent state would run from one packed completion into the next
        with pytest.raises(ValueError, match="linear-attention"):
            completion_logprobs(model, prompts, completions, group_sizes, micro_batch_size=6, padding_free=True)
        return
    with torch.no_grad():
        padded, padded_entropy = completion_logprobs(
            model, prompts, completions, group_sizes, micro_batch_size=6, statistic="entropy"
        )
        packed, packed_entropy = completion_logprobs(
            model, prompts, completions, group_sizes, micro_batch_size=6, statistic="entropy", padding_free=True
        )
        plain, _ = completion_logprobs(
            model, prompts, completions, group_sizes, micro_batch_size=6, group_shared_encoding=False
        )
    torch.testing.assert_close(packed, padded, atol=ATOL, rtol=0)
    torch.testing.assert_close(packed_entropy, padded_entropy, atol=ATOL, rtol=0)
    torch.testing.assert_close(packed, plain, atol=ATOL, rtol=0)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_group_shared_packed_gradients_equal_padded(attention, tiny_model_dir, media_samples) -> None:
    """Gradients too (the vision tower's included), under both attention implementations that take the mask."""
    model, processor = load_model_and_processor(
        tiny_model_dir("qwen2_5_vl"), dtype="float32", attn_implementation=attention
    )
    assert model.config.get_text_config()._attn_implementation == attention
    prompts = build_prompt_batch(processor, media_samples("qwen2_5_vl")[:2], family="qwen2_5_vl")
    completions = random_completions((5, 2, 4, 3))
    gradients = []
    for padding_free in (False, True):
        model.zero_grad(set_to_none=True)
        logp, _ = completion_logprobs(model, prompts, completions, [3, 1], micro_batch_size=4, padding_free=padding_free)
        (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
        gradients.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    assert gradients[0].keys() == gradients[1].keys() and any(".visual." in f".{n}" for n in gradients[0])
    for name, padded in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], padded, atol=1e-5, rtol=1e-4, msg=name)


def test_group_shared_packing_refuses_flash_attention(load_tiny, media_samples) -> None:
    model, processor = load_tiny("qwen2_5_vl")
    config = copy.deepcopy(model.config)
    config.get_text_config()._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="sdpa or eager.*group_shared_encoding=false"):
        attention_mask_for(torch.ones(1, 1, 2, 3, dtype=torch.bool), config)


def test_config_refuses_packed_shared_prefix_under_flash_attention() -> None:
    overrides = ["train.padding_free=true", "model.attn_implementation=flash_attention_2"]
    with pytest.raises(ConfigError, match="train.padding_free=true with train.group_shared_encoding=true needs sdpa"):
        load_config(None, overrides)
    load_config(None, [*overrides, "train.group_shared_encoding=false"])  # whole sequences: flash attention packs
