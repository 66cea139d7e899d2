"""A KV cache whose updates can be replayed: what lets group-shared encoding run under gradient checkpointing.

A checkpointed decoder layer runs twice: in the forward, and again in the backward to recompute
its activations. transformers' ``DynamicCache`` appends on every ``update``, so the replay would
append the same states a second time; that is why transformers drops the cache of a checkpointed
layer. A :class:`ReplayCache` layer instead computes ``prefix + new states`` from a fixed prefix
on every call, so a replay returns what the forward returned (and only re-records it).

The prompt pass fills an empty :class:`ReplayCache` (its layers record the prompt's keys and
values, with their autograd graph); :meth:`ReplayCache.continued` gives the completion pass a
cache whose prefix is those states, indexed to the completion rows inside each layer's call: a
checkpointed layer keeps neither the ``[n, ...]`` copy of the prompt states nor the attention
over them, only its input; the backward sums the G rows' gradients into the shared prompt states.
"""

from __future__ import annotations

import torch
from transformers import Cache
from transformers.cache_utils import DynamicLayer


class ReplayLayer(DynamicLayer):
    """One decoder layer's cache: ``update`` returns ``prefix[rows] + new states`` and records it, nothing more."""

    def __init__(self, prefix: tuple[torch.Tensor, torch.Tensor] | None = None, rows: torch.Tensor | None = None):
        super().__init__()
        self.prefix, self.rows = prefix, rows
        if prefix is not None:  # the prefix's length sizes the attention mask before the first update
            self.keys, self.values = prefix
            self.device, self.is_initialized = prefix[0].device, True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's keys and values: the prefix's rows, then ``key_states`` / ``value_states`` (``[n, h, T, d]``)."""
        if self.prefix is None:
            self.keys, self.values = key_states, value_states
        else:
            keys, values = (states if self.rows is None else states[self.rows] for states in self.prefix)
            self.keys, self.values = torch.cat([keys, key_states], -2), torch.cat([values, value_states], -2)
        self.device, self.is_initialized = key_states.device, True
        return self.keys, self.values


class ReplayCache(Cache):
    """A model forward's KV cache made of :class:`ReplayLayer` (one per decoder layer, added on first use)."""

    def __init__(self, layers: list[ReplayLayer] | None = None):
        if layers is None:
            super().__init__(layer_class_to_replicate=ReplayLayer)
        else:
            super().__init__(layers=layers)

    def continued(self, rows: torch.Tensor) -> ReplayCache:
        """A cache for the next tokens of ``rows`` (batch indices into this cache: one per continuing row)."""
        return ReplayCache([ReplayLayer((layer.keys, layer.values), rows) for layer in self.layers])
