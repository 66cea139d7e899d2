"""The transformers-version shims name what the installed version's models really take and return."""

from __future__ import annotations

import inspect

import pytest
import torch
from transformers import DynamicCache

from mmgrpo.models.adapters import adapter_for
from mmgrpo.models.compat import cache_argument, cache_keyword, enable_activation_checkpointing
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.tiny import TINY_FAMILIES


@pytest.mark.parametrize("family", TINY_FAMILIES.names())
def test_every_family_forward_takes_the_detected_cache_keyword(load_tiny, family) -> None:
    model, _ = load_tiny(family)
    for module in (model, adapter_for(family).backbone(model)):
        assert cache_keyword() in inspect.signature(type(module).forward).parameters, type(module).__name__


def test_a_forward_continues_the_cache_passed_to_it(tiny_qwen25vl) -> None:
    """Prefill + one cached step gives the full forward's last logits (an ignored cache would not). A model of its
    own: Qwen2.5-VL keeps the M-RoPE deltas of its last prompt with media, and a cached step without position ids
    continues from them (the shared model's, after other tests, are not this prompt's)."""
    model, _ = load_model_and_processor(tiny_qwen25vl, dtype="float32")
    model.eval()
    ids = torch.arange(3, 11)[None]  # [1, 8] text tokens, no media
    full = model(input_ids=ids, use_cache=False).logits[:, -1]  # [1, V]
    cache = DynamicCache(config=model.config)
    model(input_ids=ids[:, :-1], **cache_argument(cache), use_cache=True)
    assert cache.get_seq_length() == ids.shape[1] - 1
    step = model(input_ids=ids[:, -1:], **cache_argument(cache), use_cache=True)
    assert cache.get_seq_length() == ids.shape[1]
    torch.testing.assert_close(step.logits[:, -1], full, atol=1e-5, rtol=0)


def test_activation_checkpointing_is_switched_on(tiny_qwen25vl) -> None:
    model, _ = load_model_and_processor(tiny_qwen25vl)  # own copy: checkpointing stays on
    layers = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    assert layers and not any(m.gradient_checkpointing for m in layers)
    enable_activation_checkpointing(model, {"use_reentrant": False})
    assert all(m.gradient_checkpointing for m in layers)


def test_text_after_a_video_restarts_after_its_largest_position_on_any_axis() -> None:
    """A prompt: 2 text tokens, a video of 2 temporal x 1 x 2 merged patches whose temporal step is
    8 (transformers: t in {2, 10}, h = 2, w in {2, 3}), 2 text tokens, then left padding of 1."""
    from mmgrpo.models.compat import restart_text_after_media

    transformers_positions = torch.tensor([
        [0, 0, 1, 2, 2, 10, 10, 4, 5],  # temporal
        [0, 0, 1, 2, 2, 2, 2, 4, 5],    # height
        [0, 0, 1, 2, 3, 2, 3, 4, 5],    # width: text resumes at 2 + max(h, w) = 4
    ])[:, None]  # [3, B=1, T]
    token_types = torch.tensor([[0, 0, 0, 2, 2, 2, 2, 0, 0]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1]])
    fixed, deltas = restart_text_after_media(transformers_positions, token_types, mask)
    # the video is kept (it starts right after the text, at 2); the text after it starts at 10 + 1
    assert fixed[:, 0, 1:].tolist() == [
        [0, 1, 2, 2, 10, 10, 11, 12],
        [0, 1, 2, 2, 2, 2, 11, 12],
        [0, 1, 2, 3, 2, 3, 11, 12],
    ]
    assert deltas.tolist() == [[12 + 1 - 8]]
    # images (one temporal patch) and text-only rows come out as they went in
    image = torch.tensor([[0, 1, 2, 2, 2, 3, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]])[:, None]
    same, _ = restart_text_after_media(image, torch.tensor([[0, 0, 1, 1, 1, 1, 0]]))
    assert torch.equal(same, image)


def test_qwen25vl_models_load_with_the_original_positions(tiny_model_dir) -> None:
    from mmgrpo.models.loading import load_model_and_processor

    model, _ = load_model_and_processor(tiny_model_dir("qwen2_5_vl"))
    input_ids = torch.tensor([[1, 2, 3, 3, 3, 3, 4, 5]])
    token_types = torch.tensor([[0, 0, 2, 2, 2, 2, 0, 0]])
    positions, _ = model.model.get_rope_index(
        input_ids, token_types, video_grid_thw=torch.tensor([[2, 2, 4]]), second_per_grid_ts=torch.tensor([2.0])
    )
    temporal_step = int(2.0 * model.config.vision_config.tokens_per_second)
    assert positions[0, 0, 6] == 2 + temporal_step + 1  # after the video's last temporal position


def test_generate_and_group_shared_decoding_agree_on_a_video_prompt(load_tiny, video_sample, video_budgets) -> None:
    """transformers' generate continues from its rope deltas, mmgrpo's decoding from the prompt's
    positions: with the original numbering both continue after the video's largest position."""
    import copy

    from mmgrpo.rollout import HFEngine, SamplingParams

    model, processor = load_tiny("qwen2_5_vl")
    peaked = copy.deepcopy(model)
    with torch.no_grad():  # long, prompt-dependent greedy paths (see tests/rollout/conftest.py)
        for weight in [*peaked.get_decoder().parameters(), peaked.get_output_embeddings().weight]:
            if weight.dim() == 2:
                weight.mul_(8.0)
    greedy = SamplingParams(n=1, temperature=0, max_new_tokens=12)
    shared = HFEngine(peaked, processor, budgets=video_budgets).generate([video_sample], greedy)
    plain = HFEngine(peaked, processor, budgets=video_budgets, group_shared=False).generate([video_sample], greedy)
    assert shared[0][0].token_ids == plain[0][0].token_ids and len(shared[0][0].token_ids) > 3
