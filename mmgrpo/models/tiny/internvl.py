"""Tiny InternVL (InternVL3 / 3.5 as transformers converts them): an InternViT tower, pixel
shuffle, an MLP projector and a Qwen2 text model.

Turns are ChatML without a default system prompt; an image part is written ``<IMG_CONTEXT>\\n``,
which the processor expands to ``<img>`` + ``image_seq_length`` x ``<IMG_CONTEXT>`` + ``</img>``
per tile. As in real checkpoints (448-px tiles, up to 12 of them plus a thumbnail) an image is cut
into tiles by its aspect ratio, here of 56 px (4 x 4 patches of 14 px, 4 tokens after pixel
shuffle), as many as ``TinySpec.max_pixels`` holds (by default 4, so 1-5 tiles, 4-20 tokens).
"""

from __future__ import annotations

from transformers import (
    GotOcr2ImageProcessor,
    InternVLConfig,
    InternVLForConditionalGeneration,
    InternVLProcessor,
    InternVLVideoProcessor,
    Qwen2Tokenizer,
)

from mmgrpo.models.tiny.families import TINY_FAMILIES, TinyModel, TinySpec, decoder_config, generation_config
from mmgrpo.models.tiny.templates import chat_template
from mmgrpo.models.tiny.tokenizer import build_tokenizer

PATCH_SIZE = 14
DOWNSAMPLE_RATIO = 0.5  # pixel shuffle: 2 x 2 patches become one token, as in InternVL3
PATCHES_PER_TOKEN_SIDE = round(1 / DOWNSAMPLE_RATIO)
TILE_TOKENS = 2  # tokens along a tile's side
# The tokens InternVL3's tokenizer names (its extra special tokens) and the ChatML turn markers.
IMAGE_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}
SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", *IMAGE_TOKENS.values(),
    "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>",
)  # fmt: skip
MEDIA_MARKUP = {"image": "<IMG_CONTEXT>\n", "video": "<video>\n"}
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
# InternVL3's image normalisation (ImageNet mean and std).
IMAGENET = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}


def tiling(spec: TinySpec) -> tuple[int, int]:
    """(tile side, most tiles per image): tiles of ``TILE_TOKENS`` x ``TILE_TOKENS`` tokens, as many as
    ``max_pixels`` holds (the thumbnail of an image of several tiles comes on top)."""
    side = TILE_TOKENS * PATCH_SIZE * PATCHES_PER_TOKEN_SIDE
    _, max_pixels = spec.pixel_budget(PATCH_SIZE, PATCHES_PER_TOKEN_SIDE)
    return side, max(1, max_pixels // side**2)


@TINY_FAMILIES.register("internvl")
def build_internvl(spec: TinySpec) -> TinyModel:
    tokenizer = build_tokenizer(
        Qwen2Tokenizer,
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        chat_template=chat_template(media_markup=MEDIA_MARKUP),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        extra_special_tokens=IMAGE_TOKENS,
    )
    side, max_tiles = tiling(spec)
    image_seq_length = TILE_TOKENS**2  # tokens per tile
    vision = {
        "hidden_size": spec.vision_hidden_size,
        "intermediate_size": spec.vision_intermediate_size,
        "num_hidden_layers": spec.vision_depth,
        "num_attention_heads": spec.vision_heads,
        "image_size": side,
        "patch_size": PATCH_SIZE,
    }
    config = InternVLConfig(
        text_config=decoder_config(spec, tokenizer, model_type="qwen2"),
        vision_config=vision,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKENS["context_image_token"]),
        image_seq_length=image_seq_length,
        downsample_ratio=DOWNSAMPLE_RATIO,
        tie_word_embeddings=False,
    )
    size = {"height": side, "width": side}
    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(
            size=size, crop_to_patches=True, min_patches=1, max_patches=max_tiles, **IMAGENET
        ),
        tokenizer=tokenizer,
        video_processor=InternVLVideoProcessor(size=size, **IMAGENET),
        image_seq_length=image_seq_length,
        chat_template=tokenizer.chat_template,
    )
    model = InternVLForConditionalGeneration(config)
    model.generation_config = generation_config(tokenizer, STOP_TOKENS)
    return TinyModel(model, processor)
