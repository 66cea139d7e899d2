"""Differences between the transformers versions mmgrpo runs on, in one place.

Between 5.19 and 5.24, transformers renamed a model forward's ``past_key_values`` argument
(and output field) to ``cache``, and ``gradient_checkpointing_enable`` to
``activation_checkpointing_enable`` (the old names stay as deprecated aliases).
vLLM pins older versions (its CPU build: 5.19), so code that must run beside it asks here
instead of naming either spelling. An older forward does not reject ``cache=``: it lands
in ``**kwargs`` and is ignored, which silently decodes without the prompt.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from transformers import Cache, Qwen2Model


@functools.cache
def cache_keyword() -> str:
    """The name under which this transformers version's forwards take and return the KV cache."""
    parameters = inspect.signature(Qwen2Model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def cache_argument(cache: Cache) -> dict[str, Cache]:
    """Keyword arguments passing ``cache`` to a model forward: ``model(..., **cache_argument(cache))``."""
    return {cache_keyword(): cache}


def output_cache(output: Any) -> Cache | None:
    """The KV cache a forward returned (``use_cache=True``), under either field name."""
    return getattr(output, cache_keyword())


def enable_activation_checkpointing(
    model: torch.nn.Module, checkpointing_kwargs: dict[str, Any] | None = None
) -> None:
    """Turn on activation (gradient) checkpointing, with ``torch.utils.checkpoint`` options."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=checkpointing_kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing_kwargs)
