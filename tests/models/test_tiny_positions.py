"""Position options of the tiny Qwen models: the rotary base and Qwen3-VL's patch-position init."""

from __future__ import annotations

import torch

from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.tiny import tiny_identity


def width_turn_per_column(model: torch.nn.Module) -> float:
    """Largest angle (rad) by which one image column turns the rotary pairs M-RoPE gives the width."""
    rotary = model.model.language_model.rotary_emb
    temporal, height, width = model.config.text_config.rope_parameters["mrope_section"]
    return float(rotary.inv_freq[temporal + height : temporal + height + width].max())


def test_rope_theta_sets_the_language_models_base_and_spatial_resolution(tiny_model_dir) -> None:
    default, _ = load_model_and_processor(tiny_model_dir("qwen2_5_vl"))
    low, _ = load_model_and_processor(tiny_model_dir("qwen2_5_vl", rope_theta=10))
    assert low.config.text_config.rope_parameters["rope_theta"] == 10
    assert width_turn_per_column(default) < 0.01  # neighbouring columns look alike to attention
    assert width_turn_per_column(low) > 0.1
    assert tiny_identity("qwen2_5_vl") != tiny_identity("qwen2_5_vl", rope_theta=10)


def test_vision_position_init_std_redraws_qwen3_patch_positions(tiny_model_dir) -> None:
    default, _ = load_model_and_processor(tiny_model_dir("qwen3_vl"))
    strong, _ = load_model_and_processor(tiny_model_dir("qwen3_vl", vision_position_init_std=0.5))
    assert abs(float(default.model.visual.pos_embed.weight.std()) - 0.02) < 0.005
    assert abs(float(strong.model.visual.pos_embed.weight.std()) - 0.5) < 0.05
    default_blocks = {k: v for k, v in default.state_dict().items() if "pos_embed" not in k}
    strong_blocks = {k: v for k, v in strong.state_dict().items() if "pos_embed" not in k}
    assert all(torch.equal(default_blocks[k], strong_blocks[k]) for k in default_blocks)  # nothing else moves
