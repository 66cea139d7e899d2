"""Decoders whose layers carry a recurrent state (linear attention, convolutions): told apart by transformers' cache
type for each layer, packed batches refused for all of them, group-shared encoding for linear attention only."""

from __future__ import annotations

import pytest
from transformers import PretrainedConfig

from mmgrpo.models.packing import check_packable
from mmgrpo.models.replay_cache import ReplayCache, ReplayLayer, ReplayLinearLayer, recurrent_layer_types


def test_linear_attention_layers_get_a_replayed_state_and_refuse_packing() -> None:
    config = PretrainedConfig(layer_types=["linear_attention", "full_attention", "sliding_attention"])
    assert recurrent_layer_types(config) == {"linear_attention"}
    assert [type(layer) for layer in ReplayCache(config=config).layers] == [
        ReplayLinearLayer, ReplayLayer, ReplayLayer
    ]
    with pytest.raises(ValueError, match="linear-attention"):
        check_packable(config)


@pytest.mark.parametrize("kind", ["conv", "hybrid"])
def test_other_recurrent_layers_refuse_packing_and_group_shared_encoding(kind) -> None:
    """LFM2's convolutions and hybrid layers also carry a state along the sequence, which packing would leak and
    the replay cache does not carry yet."""
    config = PretrainedConfig(layer_types=[kind, "full_attention"])
    assert recurrent_layer_types(config) == {kind}
    with pytest.raises(ValueError, match="padding_free"):
        check_packable(config)
    with pytest.raises(ValueError, match="group_shared_encoding=false"):
        ReplayCache(config=config)


def test_attention_only_decoders_keep_a_lazily_built_cache() -> None:
    assert not recurrent_layer_types(PretrainedConfig(layer_types=["full_attention", "sliding_attention"]))
    assert not recurrent_layer_types(PretrainedConfig())
    assert ReplayCache(config=PretrainedConfig()).layers == []
