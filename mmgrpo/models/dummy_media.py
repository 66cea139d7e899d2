"""The dummy media pass: a prompt forward without media still runs the media tower, on a tiny input, at weight zero.

On several ranks every rank must run the same modules: ZeRO-2 reduces the tower's gradients after
each backward, ZeRO-3 and FSDP2 gather its weights in every forward that runs it (training, the
reference, and the prompt encoding of generation). A rank whose micro-batch or prompts carry no media
would skip the tower while another rank runs it, and the ranks' collectives stop matching.

With the pass installed, a forward of the model that starts a sequence (no filled KV cache) and has
no media input runs the tower (and projector) on the family's smallest valid input right after the
token embeddings, where the family's own forward runs it, so the modules run in the same order on
every rank, and adds ``0 * output.sum()`` to the embeddings. Autograd and the back ends' hooks see
the tower used and give it zero gradients; the embeddings, so every log-prob and every other
gradient, are unchanged (``x + 0 == x``). Continuations and decoding steps (a filled cache) never
run the tower on any rank, so they are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from mmgrpo.models.adapters import FamilyAdapter, adapter_for

MEDIA_KEYS = ("pixel_values", "pixel_values_videos", "input_features")  # inputs that make the family run its tower
CACHE_KEYS = ("cache", "past_key_values")


class DummyMediaPass:
    """The hooks of one model's backbone; ``runs`` counts the dummy passes (for tests and logs)."""

    def __init__(self, adapter: FamilyAdapter, backbone: torch.nn.Module, media: dict[str, torch.Tensor]) -> None:
        self.adapter, self.backbone, self.media = adapter, backbone, media  # media: built once per model
        self.armed = False
        self.runs = 0

    def before_forward(self, module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        """Arm the pass for a forward that starts sequences without media."""
        self.armed = not _has_media(kwargs) and not _continues_cache(kwargs)

    def after_embedding(self, module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        """The token embeddings plus zero times the tower's output on the dummy input, once per armed forward."""
        if not self.armed:
            return None
        self.armed = False
        self.runs += 1
        features = self.adapter.tower_output(self.backbone, self.media)
        return output + 0 * _total(features).to(output.dtype)


def install_dummy_media_pass(model: torch.nn.Module) -> DummyMediaPass | None:
    """Hook the dummy media pass into ``model`` (once); None for a family without a known media tower."""
    adapter = adapter_for(model)
    backbone = adapter.backbone(model)
    installed = getattr(backbone, "_mmgrpo_dummy_media", None)
    if installed is not None:
        return installed
    media = adapter.dummy_media(backbone)
    if media is None:
        return None
    dummy = DummyMediaPass(adapter, backbone, media)
    backbone.register_forward_pre_hook(dummy.before_forward, with_kwargs=True)
    backbone.get_input_embeddings().register_forward_hook(dummy.after_embedding)
    backbone._mmgrpo_dummy_media = dummy
    return dummy


def _has_media(kwargs: Mapping[str, Any]) -> bool:
    return any(kwargs.get(key) is not None for key in MEDIA_KEYS)


def _continues_cache(kwargs: Mapping[str, Any]) -> bool:
    """Whether the forward continues sequences already in its KV cache (a continuation or decoding step)."""
    cache = next((kwargs[key] for key in CACHE_KEYS if kwargs.get(key) is not None), None)
    return cache is not None and cache.get_seq_length() > 0


def _total(output: Any) -> torch.Tensor:
    """The float32 sum of every tensor in a tower's output (tensors, tuples, model outputs)."""
    if isinstance(output, torch.Tensor):
        return output.float().sum()
    parts = output.values() if isinstance(output, Mapping) else output
    return torch.stack([_total(part) for part in parts if part is not None]).sum()
