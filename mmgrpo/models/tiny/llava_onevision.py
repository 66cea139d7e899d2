"""Tiny LLaVA-OneVision (llava-onevision-qwen2 as transformers converts it): a SigLIP tower, a two-layer MLP
projector, a learned ``image_newline`` and a Qwen2 text model.

Turns are ChatML as llava-hf's template writes them: a turn's images first (``<image>`` each), then its videos
(``<video>``), then each text part after a newline. One image alone in its row is tiled "anyres": a base tile of
the whole image plus the tiles of the best grid of ``image_grid_pinpoints``, their features unpadded to the image's
aspect ratio, downsampled when they exceed ``vision_aspect_ratio`` (``anyres_max_9``: 9 tiles' worth) and closed
by a newline feature per row; an image among several in a row is its base tile and one newline. A video frame's
features are pooled 2 x 2 (rounded up), a newline after the last frame. Real checkpoints have 384-px tiles of
27 x 27 tokens and 36 grids up to 6 x 6; here 42-px tiles of 3 x 3 tokens (an odd side too) and every grid of up
to as many tiles as ``TinySpec.max_pixels`` holds (by default 7, about 112 x 112 pixels), so that prompts stay
short: a 112 x 112 image is 51 tokens.
"""

from __future__ import annotations

from transformers import (
    LlavaOnevisionConfig,
    LlavaOnevisionForConditionalGeneration,
    LlavaOnevisionImageProcessor,
    LlavaOnevisionProcessor,
    LlavaOnevisionVideoProcessor,
    Qwen2Tokenizer,
)

from mmgrpo.models.tiny.families import TINY_FAMILIES, TinyModel, TinySpec, decoder_config, generation_config
from mmgrpo.models.tiny.tokenizer import build_tokenizer

PATCH_SIZE = 14
TILE_PATCHES = 3  # patches (= tokens) along a tile's side
TILE_SIDE = PATCH_SIZE * TILE_PATCHES
MEDIA_TOKENS = {"image_token": "<image>", "video_token": "<video>"}
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *MEDIA_TOKENS.values())
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
# Every released checkpoint's, and what vLLM 0.32 computes with whatever the config says.
VISION_ASPECT_RATIO = "anyres_max_9"
SIGLIP_NORMALISATION = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}

# llava-hf's template for llava-onevision-qwen2: the role and a space, the turn's media markers, each text part
# after a newline (string contents as one text part).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + ' ' }}"
    "{%- if message['content'] is string -%}{{ '\\n' + message['content'] }}"
    "{%- else -%}"
    "{%- for part in message['content'] if part['type'] == 'image' -%}{{ '<image>' }}{%- endfor -%}"
    "{%- for part in message['content'] if part['type'] == 'video' -%}{{ '<video>' }}{%- endfor -%}"
    "{%- for part in message['content'] if part['type'] == 'text' -%}{{ '\\n' + part['text'] }}{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def grid_pinpoints(spec: TinySpec) -> list[list[int]]:
    """Every (height, width) of a grid of at most as many tiles as ``max_pixels`` holds (at least 1 x 2 and 2 x 1,
    so that images are tiled)."""
    _, max_pixels = spec.pixel_budget(PATCH_SIZE, 2)
    most = max(2, max_pixels // TILE_SIDE**2)
    return [[rows * TILE_SIDE, cols * TILE_SIDE] for rows in range(1, most + 1) for cols in range(1, most // rows + 1)]


@TINY_FAMILIES.register("llava_onevision")
def build_llava_onevision(spec: TinySpec) -> TinyModel:
    tokenizer = build_tokenizer(
        Qwen2Tokenizer,
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        extra_special_tokens=MEDIA_TOKENS,
    )
    pinpoints = grid_pinpoints(spec)
    vision = {
        "model_type": "siglip_vision_model",
        "hidden_size": spec.vision_hidden_size,
        "intermediate_size": spec.vision_intermediate_size,
        "num_hidden_layers": spec.vision_depth,
        "num_attention_heads": spec.vision_heads,
        "image_size": TILE_SIDE,
        "patch_size": PATCH_SIZE,
        "vision_use_head": False,
    }
    config = LlavaOnevisionConfig(
        text_config=decoder_config(spec, tokenizer, model_type="qwen2"),
        vision_config=vision,
        image_token_index=tokenizer.convert_tokens_to_ids(MEDIA_TOKENS["image_token"]),
        video_token_index=tokenizer.convert_tokens_to_ids(MEDIA_TOKENS["video_token"]),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        image_grid_pinpoints=pinpoints,
        vision_aspect_ratio=VISION_ASPECT_RATIO,
        tie_word_embeddings=spec.tie_word_embeddings,
    )
    size = {"height": TILE_SIDE, "width": TILE_SIDE}
    processor = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size=size, image_grid_pinpoints=pinpoints,
                                                     **SIGLIP_NORMALISATION),
        tokenizer=tokenizer,
        video_processor=LlavaOnevisionVideoProcessor(size=size, **SIGLIP_NORMALISATION),
        num_image_tokens=TILE_PATCHES**2,
        vision_feature_select_strategy="full",
        vision_aspect_ratio=VISION_ASPECT_RATIO,
        chat_template=tokenizer.chat_template,
    )
    model = LlavaOnevisionForConditionalGeneration(config)
    model.generation_config = generation_config(tokenizer, STOP_TOKENS)
    return TinyModel(model, processor)
