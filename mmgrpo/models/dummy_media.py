"""The dummy media pass: a prompt forward lacking a kind of media still runs the media tower for it, on a tiny
input, at weight zero.

On several ranks every rank must run the same modules as often: ZeRO-2 reduces the tower's gradients
after each backward, ZeRO-3 and FSDP2 gather its weights each time a forward runs it (training, the
reference, and the prompt encoding of generation). A rank whose micro-batch or prompts carry no media
would skip the tower while another rank runs it (and Qwen-VL runs its tower once for images and once
more for videos), and the ranks' collectives stop matching.

With the pass installed, a forward of the model that starts sequences (no filled KV cache) runs the
tower (and projector) on the family's smallest valid input for each kind of media it lacks
(``FamilyAdapter.tower_inputs``), right after the token embeddings, where the family's own forward
runs it, and adds ``0 * output.sum()`` to the embeddings. Autograd and the back ends' hooks see the
tower used and give it zero gradients; the embeddings, so every log-prob and every other gradient,
are unchanged (``x + 0 == x``). Continuations and decoding steps (a filled cache) run no tower on any
rank, so they are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from mmgrpo.models.adapters import FamilyAdapter, adapter_for

CACHE_KEYS = ("cache", "past_key_values")


class DummyMediaPass:
    """The hooks of one model's backbone; ``runs`` counts the dummy tower runs (for tests)."""

    def __init__(self, adapter: FamilyAdapter, backbone: torch.nn.Module) -> None:
        self.adapter, self.backbone = adapter, backbone
        self.media: dict[tuple[str, torch.device], dict[str, torch.Tensor]] = {}  # built once per modality, device
        self.missing: list[str] = []
        self.runs = 0

    def before_forward(self, module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        """Note the kinds of media a forward starting sequences lacks."""
        inputs = self.adapter.tower_inputs
        self.missing = [] if _continues_cache(kwargs) else [kind for kind in inputs if kwargs.get(inputs[kind]) is None]

    def after_embedding(self, module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        """The token embeddings plus zero times the tower's output on each missing kind's dummy input."""
        if not self.missing:
            return None
        total = sum(self._tower_total(kind, output.device) for kind in self.missing)
        self.missing = []
        return output + 0 * total.to(output.dtype)

    def _tower_total(self, modality: str, device: torch.device) -> torch.Tensor:
        key = (modality, device)
        if key not in self.media:
            self.media[key] = self.adapter.dummy_media(self.backbone, modality)
        self.runs += 1
        return _total(self.adapter.tower_output(self.backbone, modality, self.media[key]))


def install_dummy_media_pass(model: torch.nn.Module) -> DummyMediaPass | None:
    """Hook the dummy media pass into ``model`` (once); None for a family without a known media tower."""
    installed = installed_dummy_media_pass(model)
    adapter = adapter_for(model)
    if installed is not None or not adapter.tower_inputs:
        return installed
    backbone = adapter.backbone(model)
    dummy = DummyMediaPass(adapter, backbone)
    backbone.register_forward_pre_hook(dummy.before_forward, with_kwargs=True)
    backbone.get_input_embeddings().register_forward_hook(dummy.after_embedding)
    backbone._mmgrpo_dummy_media = dummy
    return dummy


def installed_dummy_media_pass(model: torch.nn.Module) -> DummyMediaPass | None:
    """The dummy media pass hooked into ``model``, if any."""
    return getattr(adapter_for(model).backbone(model), "_mmgrpo_dummy_media", None)


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
