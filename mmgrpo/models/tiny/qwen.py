"""Tiny Qwen2-VL, Qwen2.5-VL, Qwen3-VL (and its mixture of experts), Qwen3.5 (and its MoE): ChatML, M-RoPE, a
2-layer vision tower.

They share a tokenizer layout (Qwen special tokens, ChatML template with
``<|vision_start|><|image_pad|><|vision_end|>`` media markup) and differ in their
config classes, vision tower fields, patch size and processor classes.
"""

from __future__ import annotations

from typing import Any

import torch

from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2Tokenizer,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    Qwen3_5Config,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeConfig,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLMoeConfig,
    Qwen3VLMoeForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from mmgrpo.models.tiny.families import TINY_FAMILIES, TinyModel, TinySpec, decoder_config, generation_config
from mmgrpo.models.tiny.templates import chat_template
from mmgrpo.models.tiny.tokenizer import build_tokenizer

QWEN_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
QWEN_MEDIA_MARKUP = {
    "image": "<|vision_start|><|image_pad|><|vision_end|>",
    "video": "<|vision_start|><|video_pad|><|vision_end|>",
}
QWEN_STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
QWEN2_DEFAULT_SYSTEM = "You are a helpful assistant."
MERGE_SIZE = 2
QWEN2_PATCH_SIZE = 14  # Qwen2-VL, Qwen2.5-VL and Qwen2.5-Omni
TEMPORAL_PATCH_SIZE = 2
QWEN3_PATCH_SIZE = 16  # Qwen3-VL, Qwen3.5 and Qwen3-Omni
QWEN3_POSITION_GRID = 8  # side of Qwen3-VL's learned (interpolated) patch-position grid
QWEN3_HALF_GREY = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}  # pixels centred on grey


def mrope_section(head_dim: int) -> list[int]:
    """Split the rotary half-dimension into (temporal, height, width) like Qwen's 16/24/24 of 64."""
    half = head_dim // 2
    spatial = half * 3 // 8
    return [half - 2 * spatial, spatial, spatial]


def qwen_tokenizer(spec: TinySpec, *, default_system: str | None, renders_tools: bool = False) -> Qwen2Tokenizer:
    return build_tokenizer(
        Qwen2Tokenizer,
        vocab_size=spec.vocab_size,
        special_tokens=QWEN_SPECIAL_TOKENS,
        chat_template=chat_template(media_markup=QWEN_MEDIA_MARKUP, default_system=default_system,
                                    renders_tools=renders_tools),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )


def qwen_text_config(spec: TinySpec, tokenizer: Qwen2Tokenizer, **rope_extras: Any) -> dict[str, Any]:
    """The language-model half of a Qwen-VL config (M-RoPE over ``head_dim``, or over the rotated share of it that
    ``partial_rotary_factor`` gives)."""
    head_dim = spec.hidden_size // spec.num_heads
    rotary_dim = int(head_dim * rope_extras.get("partial_rotary_factor", 1.0))
    rope = {
        "rope_type": "default", "rope_theta": spec.rope_theta, "mrope_section": mrope_section(rotary_dim),
        **rope_extras,
    }
    return decoder_config(spec, tokenizer, head_dim=head_dim, rope_parameters=rope)


VISION_TOKEN_CONFIG_KEYS = {
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
}


def vision_token_ids(tokenizer: Qwen2Tokenizer) -> dict[str, int]:
    """The placeholder ids a Qwen-VL config names, looked up in this tokenizer."""
    return {key: tokenizer.convert_tokens_to_ids(token) for key, token in VISION_TOKEN_CONFIG_KEYS.items()}


def _assemble(
    spec: TinySpec,
    *,
    classes: tuple[type, type, type],
    vision: dict[str, Any],
    video_processor: Any,
    image_processor: Qwen2VLImageProcessor,
    default_system: str | None = QWEN2_DEFAULT_SYSTEM,
    renders_tools: bool = False,
    rope_extras: dict[str, Any] | None = None,
    text_extras: dict[str, Any] | None = None,
) -> TinyModel:
    """Config + processor + random model from the parts in which the Qwen families differ.

    ``classes`` is (config class, model class, processor class).
    """
    config_class, model_class, processor_class = classes
    tokenizer = qwen_tokenizer(spec, default_system=default_system, renders_tools=renders_tools)
    text = qwen_text_config(spec, tokenizer, **(rope_extras or {})) | (text_extras or {})
    config = config_class(text_config=text, vision_config=vision, **vision_token_ids(tokenizer))
    processor = processor_class(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=tokenizer.chat_template,
    )
    model = model_class(config)
    model.generation_config = generation_config(tokenizer, QWEN_STOP_TOKENS)
    return TinyModel(model, processor)


def qwen2_video_processor(spec: TinySpec, patch_size: int, **kwargs: Any) -> Qwen2VLVideoProcessor:
    min_pixels, max_pixels = spec.pixel_budget(patch_size, MERGE_SIZE)
    # cap_pixels_per_frame: qwen-vl-utils semantics, the future transformers default.
    return Qwen2VLVideoProcessor(
        min_pixels=min_pixels, max_pixels=max_pixels, max_frames=spec.max_frames, cap_pixels_per_frame=True,
        patch_size=patch_size, merge_size=MERGE_SIZE, **kwargs,
    )


def qwen2_image_processor(spec: TinySpec, patch_size: int, **kwargs: Any) -> Qwen2VLImageProcessor:
    min_pixels, max_pixels = spec.pixel_budget(patch_size, MERGE_SIZE)
    return Qwen2VLImageProcessor(
        min_pixels=min_pixels, max_pixels=max_pixels, patch_size=patch_size, merge_size=MERGE_SIZE, **kwargs
    )


def _vision_grid(patch_size: int) -> dict[str, int]:
    return {"patch_size": patch_size, "spatial_merge_size": MERGE_SIZE, "temporal_patch_size": TEMPORAL_PATCH_SIZE}


def vision_tower(spec: TinySpec, patch_size: int, **extras: Any) -> dict[str, Any]:
    """The vision config Qwen2.5-VL, Qwen2.5-Omni and Qwen3-VL share (Qwen2-VL names its fields differently)."""
    return {
        "depth": spec.vision_depth,
        "hidden_size": spec.vision_hidden_size,
        "intermediate_size": spec.vision_intermediate_size,
        "num_heads": spec.vision_heads,
        "out_hidden_size": spec.hidden_size,
        **_vision_grid(patch_size),
        **extras,
    }


@TINY_FAMILIES.register("qwen2_vl")
def build_qwen2_vl(spec: TinySpec) -> TinyModel:
    patch_size = QWEN2_PATCH_SIZE
    vision = {
        "depth": spec.vision_depth,
        "embed_dim": spec.vision_hidden_size,
        "mlp_ratio": spec.vision_intermediate_size // spec.vision_hidden_size,
        "num_heads": spec.vision_heads,
        "hidden_size": spec.hidden_size,
        **_vision_grid(patch_size),
    }
    return _assemble(
        spec,
        classes=(Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor),
        vision=vision,
        image_processor=qwen2_image_processor(spec, patch_size),
        video_processor=qwen2_video_processor(spec, patch_size),
    )


@TINY_FAMILIES.register("qwen2_5_vl")
def build_qwen2_5_vl(spec: TinySpec) -> TinyModel:
    return _assemble(
        spec,
        classes=(Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor),
        vision=windowed_vision_tower(spec),
        image_processor=qwen2_image_processor(spec, QWEN2_PATCH_SIZE),
        video_processor=qwen2_video_processor(spec, QWEN2_PATCH_SIZE),
    )


def windowed_vision_tower(spec: TinySpec) -> dict[str, Any]:
    """Qwen2.5-VL's vision tower (also Qwen2.5-Omni's): window attention of 14-px patches. One attention window
    covers a whole tiny image; the last block attends fully."""
    return vision_tower(
        spec,
        QWEN2_PATCH_SIZE,
        window_size=QWEN2_PATCH_SIZE * MERGE_SIZE * 4,
        fullatt_block_indexes=[spec.vision_depth - 1],
    )


@TINY_FAMILIES.register("qwen3_vl")
def build_qwen3_vl(spec: TinySpec) -> TinyModel:
    return _assemble_qwen3(spec, Qwen3VLConfig, Qwen3VLForConditionalGeneration, deepstack_visual_indexes=[0])


def qwen3_experts(spec: TinySpec) -> dict[str, int]:
    """A Qwen3 mixture of experts, small: each decoder layer's MLP 2 of 4 routed experts of half the MLP's width."""
    return {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": spec.intermediate_size // 2}


@TINY_FAMILIES.register("qwen3_vl_moe")
def build_qwen3_vl_moe(spec: TinySpec) -> TinyModel:
    """Qwen3-VL's mixture-of-experts checkpoints (30B-A3B, 235B-A22B): Qwen3-VL with routed experts."""
    return _assemble_qwen3(spec, Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration,
                           text_extras=qwen3_experts(spec), deepstack_visual_indexes=[0])


# Qwen3.5's hybrid decoder: three Gated DeltaNet (linear-attention) layers to one of full attention, ending on a
# full one; each linear layer's keys and values are heads of a quarter and an eighth of the width.
QWEN3_5_FULL_ATTENTION_EVERY = 4
QWEN3_5_PARTIAL_ROTARY = 0.5  # of each attention head's dimensions rotated (0.25 in the released checkpoints)


@TINY_FAMILIES.register("qwen3_5")
def build_qwen3_5(spec: TinySpec) -> TinyModel:
    """Qwen3.5 (natively multimodal): Qwen3-VL's vision tower (without its deepstack) and processors before a
    decoder whose layers are mostly linear attention; M-RoPE over part of each full-attention head."""
    return _assemble_qwen3(spec, Qwen3_5Config, Qwen3_5ForConditionalGeneration,
                           rope_extras={"partial_rotary_factor": QWEN3_5_PARTIAL_ROTARY},
                           text_extras=_qwen3_5_layers(spec))


@TINY_FAMILIES.register("qwen3_5_moe")
def build_qwen3_5_moe(spec: TinySpec) -> TinyModel:
    """Qwen3.5's mixture-of-experts checkpoints: the same hybrid decoder, each layer's MLP 2 of 4 routed experts
    and a shared one."""
    experts = qwen3_experts(spec) | {"shared_expert_intermediate_size": spec.intermediate_size // 2}
    return _assemble_qwen3(spec, Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration,
                           rope_extras={"partial_rotary_factor": QWEN3_5_PARTIAL_ROTARY},
                           text_extras=_qwen3_5_layers(spec) | experts)


def _qwen3_5_layers(spec: TinySpec) -> dict[str, Any]:
    """Qwen3.5's layer pattern and linear-attention heads."""
    layer_types = ["full_attention" if (layer + 1) % QWEN3_5_FULL_ATTENTION_EVERY == 0 else "linear_attention"
                   for layer in range(spec.num_layers)]
    layer_types[-1] = "full_attention"
    head_dim = spec.linear_attention_head_dim or spec.hidden_size // spec.num_heads
    linear = {"linear_conv_kernel_dim": 4, "linear_key_head_dim": head_dim, "linear_value_head_dim": head_dim,
              "linear_num_key_heads": spec.num_kv_heads, "linear_num_value_heads": spec.num_heads}
    return {"layer_types": layer_types, **linear}


def _assemble_qwen3(
    spec: TinySpec, config_class: type, model_class: type, *, rope_extras: dict[str, Any] | None = None,
    text_extras: dict[str, Any] | None = None, **vision_extras: Any,
) -> TinyModel:
    """Qwen3-VL and Qwen3.5: 16-px patches with learned positions, grey-centred pixels, Qwen3's template."""
    min_pixels, max_pixels = spec.pixel_budget(QWEN3_PATCH_SIZE, MERGE_SIZE)
    video_processor = Qwen3VLVideoProcessor(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels * spec.max_frames},
        max_frames=spec.max_frames,
        cap_pixels_per_frame=True,
        **QWEN3_HALF_GREY,
    )
    tiny = _assemble(
        spec,
        classes=(config_class, model_class, Qwen3VLProcessor),
        vision=qwen3_vision_tower(spec, **vision_extras),
        image_processor=qwen2_image_processor(spec, QWEN3_PATCH_SIZE, **QWEN3_HALF_GREY),
        video_processor=video_processor,
        default_system=None,
        renders_tools=True,  # Qwen3's template lists tools; Qwen2-VL's and Qwen2.5-VL's ignore them
        rope_extras={"mrope_interleaved": True, **(rope_extras or {})},
        text_extras=text_extras,
    )
    init_vision_positions(tiny.model, spec)
    return tiny


def qwen3_vision_tower(spec: TinySpec, **extras: Any) -> dict[str, Any]:
    """Qwen3-VL's vision tower (also Qwen3.5's and Qwen3-Omni's): 16-px patches with a learned position grid."""
    return vision_tower(spec, QWEN3_PATCH_SIZE, num_position_embeddings=QWEN3_POSITION_GRID**2, **extras)


def init_vision_positions(model: torch.nn.Module, spec: TinySpec) -> None:
    """Redraw a Qwen3-VL-style tower's learned patch positions at ``spec.vision_position_init_std``, if set."""
    if spec.vision_position_init_std is not None:
        with torch.no_grad():
            model.model.visual.pos_embed.weight.normal_(0.0, spec.vision_position_init_std)
