"""The transformers-version shims name what the installed version's models really take and return."""

from __future__ import annotations

import inspect

import pytest
import torch

from mmgrpo.models.adapters import adapter_for
from mmgrpo.models.compat import cache_argument, cache_keyword, enable_activation_checkpointing, output_cache
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.tiny import TINY_FAMILIES


@pytest.mark.parametrize("family", TINY_FAMILIES.names())
def test_every_family_forward_takes_the_detected_cache_keyword(load_tiny, family) -> None:
    model, _ = load_tiny(family)
    for module in (model, adapter_for(family).backbone(model)):
        assert cache_keyword() in inspect.signature(type(module).forward).parameters, type(module).__name__


def test_a_forward_continues_the_cache_it_returned(load_tiny) -> None:
    """Prefill + one cached step gives the full forward's last logits (an ignored cache would not)."""
    model, _ = load_tiny("qwen2_5_vl")
    ids = torch.arange(3, 11)[None]  # [1, 8] text tokens, no media
    full = model(input_ids=ids, use_cache=False).logits[:, -1]  # [1, V]
    prefill = model(input_ids=ids[:, :-1], use_cache=True)
    cache = output_cache(prefill)
    assert cache is not None and cache.get_seq_length() == ids.shape[1] - 1
    step = model(input_ids=ids[:, -1:], **cache_argument(cache), use_cache=True)
    assert output_cache(step).get_seq_length() == ids.shape[1]
    torch.testing.assert_close(step.logits[:, -1], full, atol=1e-5, rtol=0)


def test_activation_checkpointing_is_switched_on(tiny_qwen25vl) -> None:
    model, _ = load_model_and_processor(tiny_qwen25vl)  # own copy: checkpointing stays on
    layers = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    assert layers and not any(m.gradient_checkpointing for m in layers)
    enable_activation_checkpointing(model, {"use_reentrant": False})
    assert all(m.gradient_checkpointing for m in layers)
