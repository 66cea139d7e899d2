"""Tiny SmolVLM (Idefics3 lineage): a SigLIP-style tower, pixel shuffle, a Llama text model.

The non-Qwen reference family: images are split into square tiles plus a global view,
each tile framed by ``<fake_token_around_image>`` and a ``<row_r_col_c>`` marker; turns
are ``<|im_start|>User:...<end_of_utterance>``.
"""

from __future__ import annotations

import math

from transformers import (
    GPT2Tokenizer,
    SmolVLMConfig,
    SmolVLMForConditionalGeneration,
    SmolVLMImageProcessor,
    SmolVLMProcessor,
    SmolVLMVideoProcessor,
)

from mmgrpo.models.tiny.families import TINY_FAMILIES, TinyModel, TinySpec, decoder_config, generation_config
from mmgrpo.models.tiny.templates import chat_template
from mmgrpo.models.tiny.tokenizer import build_tokenizer

TILE_SIZE = 64  # vision tower input side; every image tile is resized to it
PATCH_SIZE = 16
SCALE_FACTOR = 2  # pixel-shuffle factor: (64/16)^2 / 2^2 = 4 tokens per tile
DEFAULT_TILES_PER_SIDE = 2
VIDEO_FPS = 1
CHAT_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<end_of_utterance>")
IMAGE_TOKENS = ("<fake_token_around_image>", "<image>", "<global-img>")
STOP_TOKENS = ("<end_of_utterance>",)


def tile_markers(tiles_per_side: int) -> list[str]:
    """``<row_r_col_c>`` for every tile position an image can be split into."""
    sides = range(1, tiles_per_side + 1)
    return [f"<row_{row}_col_{col}>" for row in sides for col in sides]


@TINY_FAMILIES.register("smolvlm")
def build_smolvlm(spec: TinySpec) -> TinyModel:
    longest_edge = math.isqrt(spec.max_pixels) if spec.max_pixels else DEFAULT_TILES_PER_SIDE * TILE_SIZE
    tiles_per_side = math.ceil(longest_edge / TILE_SIZE)
    tokenizer = build_tokenizer(
        GPT2Tokenizer,
        vocab_size=spec.vocab_size,
        special_tokens=[*CHAT_TOKENS, *IMAGE_TOKENS, *tile_markers(tiles_per_side)],
        chat_template=chat_template(
            media_markup={"image": "<image>", "video": "<video>"},
            turn_open="'<|im_start|>' + message['role'] | capitalize + ':'",
            turn_close="<end_of_utterance>\n",
            generation_prompt="Assistant:",
        ),
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    text = decoder_config(spec, tokenizer, model_type="llama", bos_token_id=tokenizer.bos_token_id)
    vision = {
        "hidden_size": spec.vision_hidden_size,
        "intermediate_size": spec.vision_intermediate_size,
        "num_hidden_layers": spec.vision_depth,
        "num_attention_heads": spec.vision_heads,
        "image_size": TILE_SIZE,
        "patch_size": PATCH_SIZE,
    }
    config = SmolVLMConfig(
        text_config=text,
        vision_config=vision,
        scale_factor=SCALE_FACTOR,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    sizes = {"size": {"longest_edge": longest_edge}, "max_image_size": {"longest_edge": TILE_SIZE}}
    # As in real SmolVLM checkpoints; used when the caller asks the processor to sample frames.
    video_sampling = {"fps": VIDEO_FPS, "max_frames": spec.max_frames, "video_size": sizes["size"]}
    processor = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(**sizes),
        tokenizer=tokenizer,
        video_processor=SmolVLMVideoProcessor(**sizes, video_sampling=video_sampling),
        image_seq_len=(TILE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2,
        chat_template=tokenizer.chat_template,
    )
    model = SmolVLMForConditionalGeneration(config)
    model.generation_config = generation_config(tokenizer, STOP_TOKENS)
    return TinyModel(model, processor)
