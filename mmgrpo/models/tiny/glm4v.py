"""Tiny GLM-4.1V (``glm4v``), GLM-4.5V (``glm4v_moe``, also GLM-4.6V's released model type) and ``glm46v`` (GLM-4.6V's
model type in transformers, composing its text and vision configs by their own types): a Qwen-VL-like vision tower
(14-px patches, 2 x 2 merged by a convolution), a GLM-4 text model (partial rotary; 4.1V's with post-norms, 4.5V's and
4.6V's a mixture of experts after a first dense layer) with 3-D positions, and GLM's turn format.

A conversation opens with ``[gMASK]<sop>``; a turn opens with ``<|system|>``, ``<|user|>`` or ``<|assistant|>`` and
has no closing token: the assistant stops by writing the next role (``<|user|>``, ``<|observation|>``) or
``<|endoftext|>``. An image is ``<|begin_of_image|><|image|><|end_of_image|>``, the ``<|image|>`` expanded to one per
merged patch; a video is ``<|begin_of_video|><|video|><|end_of_video|>``, the ``<|video|>`` expanded to one image
structure per temporal patch followed by its timestamp in seconds (its tokens are ``<|image|>`` too; ``glm46v``'s
processor writes the timestamp as ``2.0 seconds``, the others as ``2``).
"""

from __future__ import annotations

from typing import Any

from transformers import (
    Glm46VConfig,
    Glm46VForConditionalGeneration,
    Glm46VImageProcessor,
    Glm46VProcessor,
    Glm46VVideoProcessor,
    Glm4vConfig,
    Glm4vForConditionalGeneration,
    Glm4vImageProcessor,
    Glm4vMoeConfig,
    Glm4vMoeForConditionalGeneration,
    Glm4vProcessor,
    Glm4vVideoProcessor,
    PreTrainedModel,
    Qwen2Tokenizer,
)

from mmgrpo.models.tiny.families import TINY_FAMILIES, TinyModel, TinySpec, decoder_config, generation_config
from mmgrpo.models.tiny.qwen import MERGE_SIZE, QWEN2_PATCH_SIZE, TEMPORAL_PATCH_SIZE, mrope_section, vision_tower
from mmgrpo.models.tiny.templates import chat_template
from mmgrpo.models.tiny.tokenizer import build_tokenizer

MEDIA_MARKUP = {
    "image": "<|begin_of_image|><|image|><|end_of_image|>",
    "video": "<|begin_of_video|><|video|><|end_of_video|>",
}
MEDIA_TOKEN_CONFIG_KEYS = {
    "image_token_id": "<|image|>",
    "video_token_id": "<|video|>",
    "image_start_token_id": "<|begin_of_image|>",
    "image_end_token_id": "<|end_of_image|>",
    "video_start_token_id": "<|begin_of_video|>",
    "video_end_token_id": "<|end_of_video|>",
}
SPECIAL_TOKENS = (
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
    "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
    *MEDIA_TOKEN_CONFIG_KEYS.values(),
    "<|begin_of_box|>", "<|end_of_box|>",
)
STOP_TOKENS = ("<|endoftext|>", "<|user|>", "<|observation|>")
PARTIAL_ROTARY_FACTOR = 0.5  # GLM rotates half of each head's dimensions

CHAT_TEMPLATE = chat_template(
    media_markup=MEDIA_MARKUP,
    turn_open="'<|' + message['role'] + '|>\\n'",
    turn_close="",
    generation_prompt="<|assistant|>\n",
    conversation_open="[gMASK]<sop>",
)


# GLM-4.5V's mixture of experts, small: a dense first layer, then a shared expert and 2 of 4 routed ones per token.
MOE_TEXT = {"n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
            "use_qk_norm": False}  # as in 4.5V's config: vLLM reads it


@TINY_FAMILIES.register("glm4v")
def build_glm4v(spec: TinySpec) -> TinyModel:
    return _assemble(spec, Glm4vConfig, Glm4vForConditionalGeneration)


@TINY_FAMILIES.register("glm4v_moe")
def build_glm4v_moe(spec: TinySpec) -> TinyModel:
    return _assemble(spec, Glm4vMoeConfig, Glm4vMoeForConditionalGeneration, **_moe_text(spec))


@TINY_FAMILIES.register("glm46v")
def build_glm46v(spec: TinySpec) -> TinyModel:
    """GLM-4.6V's own model type: its text config names its kind (4.6V's experts), its processors are 4.6V's."""
    return _assemble(
        spec, Glm46VConfig, Glm46VForConditionalGeneration, processors=GLM46V_PROCESSORS,
        vision_extras={"model_type": "glm4v_vision"}, model_type="glm4v_moe_text", **_moe_text(spec),
    )


def _moe_text(spec: TinySpec) -> dict[str, Any]:
    """The text config of a GLM-V mixture of experts (head_dim is in 4.5V's config too)."""
    return {"moe_intermediate_size": spec.intermediate_size // 2, "head_dim": spec.hidden_size // spec.num_heads,
            **MOE_TEXT}


GLM4V_PROCESSORS = (Glm4vImageProcessor, Glm4vVideoProcessor, Glm4vProcessor)
GLM46V_PROCESSORS = (Glm46VImageProcessor, Glm46VVideoProcessor, Glm46VProcessor)


def _assemble(
    spec: TinySpec,
    config_class: type,
    model_class: type[PreTrainedModel],
    processors: tuple[type, type, type] = GLM4V_PROCESSORS,
    vision_extras: dict[str, Any] | None = None,
    **text_extras: Any,
) -> TinyModel:
    """Tokenizer, processors (image, video, the processor), config and random model of a GLM-V family;
    ``text_extras`` / ``vision_extras`` go to its text / vision config."""
    tokenizer = build_tokenizer(
        Qwen2Tokenizer,
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    head_dim = spec.hidden_size // spec.num_heads
    rotary_dim = int(head_dim * PARTIAL_ROTARY_FACTOR)
    text = decoder_config(spec, tokenizer, rope_parameters={
        "rope_type": "default", "rope_theta": spec.rope_theta, "partial_rotary_factor": PARTIAL_ROTARY_FACTOR,
        "mrope_section": mrope_section(rotary_dim),
    }, **text_extras)
    min_pixels, max_pixels = spec.pixel_budget(QWEN2_PATCH_SIZE, MERGE_SIZE)
    # The learned patch-position grid covers the largest image; others interpolate it.
    vision = vision_tower(spec, QWEN2_PATCH_SIZE, image_size=int(max_pixels**0.5), **(vision_extras or {}))
    ids = {key: tokenizer.convert_tokens_to_ids(token) for key, token in MEDIA_TOKEN_CONFIG_KEYS.items()}
    config = config_class(text_config=text, vision_config=vision, tie_word_embeddings=spec.tie_word_embeddings, **ids)
    grid = {"patch_size": QWEN2_PATCH_SIZE, "temporal_patch_size": TEMPORAL_PATCH_SIZE, "merge_size": MERGE_SIZE}
    # GLM's processors budget pixels over temporal patches: an image counts as its two-frame patch.
    image_processor_class, video_processor_class, processor_class = processors
    image_processor = image_processor_class(
        size={"shortest_edge": TEMPORAL_PATCH_SIZE * min_pixels, "longest_edge": TEMPORAL_PATCH_SIZE * max_pixels},
        **grid,
    )
    video_processor = video_processor_class(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels * spec.max_frames},
        max_image_size={"longest_edge": max_pixels * spec.max_frames},
        **grid,
    )
    processor = processor_class(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
        chat_template=tokenizer.chat_template,
    )
    model = model_class(config)
    model.generation_config = generation_config(tokenizer, STOP_TOKENS)
    return TinyModel(model, processor)
