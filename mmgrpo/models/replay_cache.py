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

A model with linear-attention layers (Qwen3.5's Gated DeltaNet) carries a prompt in those layers as a
convolution window and a recurrent state instead of keys and values: :class:`ReplayLinearLayer` records the
prompt's and gives each completion row the prompt's, the same on every replay.
"""

from __future__ import annotations

import torch
from transformers import Cache, PretrainedConfig
from transformers.cache_utils import (
    DYNAMIC_LAYER_TYPE_MAPPING, DynamicLayer, LinearAttentionCacheLayerMixin, LinearAttentionLayer,
)

LINEAR_ATTENTION = "linear_attention"  # the layer type transformers' hybrid models name such layers by


def recurrent_layer_types(config: PretrainedConfig) -> set[str]:
    """The layer types of ``config``'s language model whose cache is a recurrent state rather than keys and values
    (linear attention, convolutions, hybrids of either with attention), as transformers' caches map them."""
    kinds = getattr(config.get_text_config(), "layer_types", None) or ()
    return {kind for kind in kinds
            if issubclass(DYNAMIC_LAYER_TYPE_MAPPING.get(kind, DynamicLayer), LinearAttentionCacheLayerMixin)}


def has_recurrent_layers(config: PretrainedConfig) -> bool:
    """Whether ``config``'s language model carries a recurrent state along a sequence (Qwen3.5's hybrid decoder)."""
    return bool(recurrent_layer_types(config))


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


class _RowsOf(dict):
    """A layer's states (one per state index) read as ``rows`` of the prefix's on each access: no ``[n, ...]`` copy
    outlives the layer's call (under checkpointing it is made again in the replay)."""

    def __init__(self, states: torch.Tensor, rows: torch.Tensor | None):
        super().__init__({0: states})
        self.rows = rows

    def __getitem__(self, state_idx: int) -> torch.Tensor:
        states = super().__getitem__(state_idx)
        return states if self.rows is None else states[self.rows]


class ReplayLinearLayer(LinearAttentionLayer):
    """One linear-attention layer's cache: the previous state is the prefix's (``rows`` of it), fixed, and every
    update records the new convolution window and recurrent state without touching it, so a replay sees what the
    forward saw. A prompt's layer (no prefix) has no previous state."""

    def __init__(self, prefix: ReplayLinearLayer | None = None, rows: torch.Tensor | None = None):
        super().__init__()
        # "Recording the past" keeps transformers' one-token convolution from writing the window in place: every
        # call goes through update_conv_state (no recurrent states are kept: recurrent_states_to_keep stays unset).
        self.record_past = True
        self.prefix_length, self.new_length = 0, 0
        self.recorded_conv: torch.Tensor | None = None
        self.recorded_recurrent: torch.Tensor | None = None
        if prefix is not None:
            self.conv_states = _RowsOf(prefix.recorded_conv, rows)
            self.recurrent_states = _RowsOf(prefix.recorded_recurrent, rows)
            self.conv_kernel_size[0] = prefix.conv_kernel_size[0]
            self.has_previous_state[0] = self.is_conv_states_initialized[0] = True
            self.is_recurrent_states_initialized[0] = True
            self.prefix_length = prefix.get_seq_length()
            self.device = prefix.recorded_conv.device

    def update_conv_state(
        self, conv_states: torch.Tensor, state_idx: int = 0, conv_kernel_size: int | None = None, **kwargs: object
    ) -> torch.Tensor:
        """The convolution's input ``[n, C, T]`` behind the previous window (or zeros), recording the last window."""
        kernel = conv_kernel_size or self.conv_kernel_size[state_idx]
        self.conv_kernel_size[state_idx] = kernel
        if self.has_previous_state[state_idx]:
            full = torch.cat([self.conv_states[state_idx], conv_states], -1)
        else:
            full = torch.nn.functional.pad(conv_states, (max(kernel - conv_states.shape[-1], 0), 0))
        self.recorded_conv, self.new_length = full[..., -kernel:], conv_states.shape[-1]
        return full

    def update_recurrent_state(
        self, recurrent_states: torch.Tensor | list[torch.Tensor], state_idx: int = 0, **kwargs: object
    ) -> torch.Tensor:
        """Record the recurrent state after the new tokens."""
        last = recurrent_states if isinstance(recurrent_states, torch.Tensor) else recurrent_states[-1]
        self.recorded_recurrent = last
        return last

    def get_seq_length(self) -> int:
        return self.prefix_length + self.new_length


class ReplayCache(Cache):
    """A model forward's KV cache made of :class:`ReplayLayer` (one per decoder layer, added on first use), and of
    :class:`ReplayLinearLayer` where ``config`` names linear-attention layers (all layers then made up front)."""

    def __init__(
        self, layers: list[ReplayLayer | ReplayLinearLayer] | None = None, config: PretrainedConfig | None = None
    ):
        if layers is None and config is not None and has_recurrent_layers(config):
            unsupported = recurrent_layer_types(config) - {LINEAR_ATTENTION}
            if unsupported:
                raise ValueError(f"group-shared encoding does not support {sorted(unsupported)} layers yet: set "
                                 "train.group_shared_encoding=false")
            kinds = config.get_text_config().layer_types
            layers = [ReplayLinearLayer() if kind == LINEAR_ATTENTION else ReplayLayer() for kind in kinds]
        if layers is None:
            super().__init__(layer_class_to_replicate=ReplayLayer)
        else:
            super().__init__(layers=layers)

    def continued(self, rows: torch.Tensor) -> ReplayCache:
        """A cache for the next tokens of ``rows`` (batch indices into this cache: one per continuing row)."""
        return ReplayCache([
            ReplayLinearLayer(layer, rows) if isinstance(layer, ReplayLinearLayer)
            else ReplayLayer((layer.keys, layer.values), rows)
            for layer in self.layers
        ])
