"""Model-family quirks behind one interface, so the data path never branches on a family.

A :class:`FamilyAdapter` answers the questions a training or decoding loop must ask
about a VLM family:

- ``prompt_positions`` / ``continuation_positions``: the position ids of a left-padded
  prompt and of the tokens that follow it (Qwen-VL's M-RoPE gives media tokens 3-D
  positions, so they are not simply 0..n-1). The continuation of a prompt ending in text
  continues from its last position + 1 on every axis, exactly what the family's own
  forward computes over the whole prompt + completion sequence.
- ``expected_media_tokens``: how many placeholder tokens each row's media features need.
- ``select_media``: the media tensors of a subset of rows (some families concatenate
  all images' patches into one tensor instead of stacking them per row).
- ``backbone`` / ``output_head``: the module giving hidden states and the LM head, so
  log-probs can be computed in chunks instead of materialising all logits.
- ``tower_prefixes`` / ``projector_prefixes``: the parameter-name prefixes (in memory) of the media encoder and
  of the projector, which ``model.freeze_vision_tower`` / ``model.freeze_projector`` freeze.
- ``tower_inputs`` / ``dummy_media`` / ``tower_output``: the inputs that make the forward run the media tower, a
  smallest valid one of each, and the tower run on it (the dummy media pass, :mod:`mmgrpo.models.dummy_media`).

Adapters are registered in :data:`FAMILY_ADAPTERS` under the config's ``model_type``; unknown families get the
generic :class:`FamilyAdapter` (1-D rotary positions over real tokens, media tensors stacked per row).
"""

from __future__ import annotations

import torch
from transformers import PretrainedConfig

from mmgrpo.models.adapters.audio import AudioPerItemAdapter
from mmgrpo.models.adapters.base import MEDIA_KINDS, FamilyAdapter, PositionIds, unwrap_model
from mmgrpo.models.adapters.gemma3 import Gemma3Adapter
from mmgrpo.models.adapters.glm4v import Glm4vAdapter
from mmgrpo.models.adapters.internvl import InternVLAdapter
from mmgrpo.models.adapters.llava_onevision import LlavaOnevisionAdapter
from mmgrpo.models.adapters.omni import OmniThinkerAdapter, Qwen3OmniThinkerAdapter
from mmgrpo.models.adapters.qwen_vl import Qwen3_5Adapter, QwenVLAdapter
from mmgrpo.models.adapters.tiled import TiledImageAdapter
from mmgrpo.models.compat import omni_thinker_holds_towers
from mmgrpo.registry import Registry

__all__ = ["FAMILY_ADAPTERS", "MEDIA_KINDS", "FamilyAdapter", "PositionIds", "adapter_for", "unwrap_model"]

FAMILY_ADAPTERS: Registry[FamilyAdapter] = Registry("model family adapter")
for _model_type in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"):
    FAMILY_ADAPTERS.add(_model_type, QwenVLAdapter())
for _model_type in ("qwen3_5", "qwen3_5_moe"):
    FAMILY_ADAPTERS.add(_model_type, Qwen3_5Adapter())
for _model_type in ("smolvlm", "idefics3"):
    FAMILY_ADAPTERS.add(_model_type, TiledImageAdapter())
FAMILY_ADAPTERS.add("qwen2_audio", AudioPerItemAdapter())
FAMILY_ADAPTERS.add("internvl", InternVLAdapter())
FAMILY_ADAPTERS.add("gemma3", Gemma3Adapter())
for _model_type in ("glm4v", "glm4v_moe", "glm46v"):
    FAMILY_ADAPTERS.add(_model_type, Glm4vAdapter())
FAMILY_ADAPTERS.add("llava_onevision", LlavaOnevisionAdapter())
# The thinkers' model types (a full qwen2_5_omni or qwen3_omni_moe checkpoint is refused at load).
for _model_type, _adapter in (("qwen2_5_omni_thinker", OmniThinkerAdapter()),
                              ("qwen3_omni_moe_thinker", Qwen3OmniThinkerAdapter())):
    if omni_thinker_holds_towers(_model_type):
        FAMILY_ADAPTERS.add(_model_type, _adapter)

GENERIC_ADAPTER = FamilyAdapter()


def adapter_for(family: str | PretrainedConfig | torch.nn.Module) -> FamilyAdapter:
    """The adapter of a ``model_type`` name, a config, or a model; the generic one if none is registered."""
    if isinstance(family, torch.nn.Module):
        family = unwrap_model(family).config
    if isinstance(family, PretrainedConfig):
        family = family.model_type
    return FAMILY_ADAPTERS.get(family) if family in FAMILY_ADAPTERS else GENERIC_ADAPTER
