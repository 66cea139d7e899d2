"""Tiny Gemma 3 (the image-text checkpoints, 4B and up): a SigLIP tower, average pooling of its patches, a
linear projector and a Gemma 3 text model with sliding-window and global attention layers.

Turns are ``<start_of_turn>user`` / ``<start_of_turn>model`` without a system role (a system message's text
opens the first user turn, as Gemma's template does), the conversation opens with ``<bos>``, and an image
part is written ``<start_of_image>``, which the processor expands to ``<start_of_image>`` +
``mm_tokens_per_image`` x ``<image_soft_token>`` + ``<end_of_image>``. Every image is resized to one square
(896 px and 256 tokens in real checkpoints; here as many 28-px pooled tokens as ``TinySpec.max_pixels`` holds,
by default 112 px and 16 tokens); inside an image the tokens attend to each other both ways.
"""

from __future__ import annotations

import math

from transformers import (
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Gemma3ImageProcessor,
    Gemma3Processor,
    Qwen2Tokenizer,
)

from mmgrpo.models.tiny.families import TINY_FAMILIES, TinyModel, TinySpec, decoder_config, generation_config
from mmgrpo.models.tiny.tokenizer import build_tokenizer

PATCH_SIZE = 14
POOL = 2  # patches along a pooled token's side (4 in real checkpoints: 64 x 64 patches -> 16 x 16 tokens)
# The tokens Gemma 3's tokenizer names (its extra special tokens) and its turn markers.
IMAGE_TOKENS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", *IMAGE_TOKENS.values())
STOP_TOKENS = ("<end_of_turn>", "<eos>")
# Runs of newlines are single tokens in Gemma's vocabulary (the processor writes "\n\n" around an image; vLLM
# merges the newline tokens its expansion puts side by side, looking them up by these strings).
NEWLINE_RUNS = tuple("\n" * count for count in range(1, 5))
SIGLIP_NORMALISATION = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
LOCAL_ROPE_THETA = 10_000.0  # the sliding-window layers' rotary base; the global layers use TinySpec.rope_theta

# Gemma's turn format: the system text opens the first user turn, "assistant" is "model".
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- set parts = namespace(prefix='') -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}{%- set parts.prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- else -%}{%- for part in messages[0]['content'] if part['type'] == 'text' -%}"
    "{%- set parts.prefix = parts.prefix + part['text'] -%}{%- endfor -%}"
    "{%- set parts.prefix = parts.prefix + '\\n\\n' -%}{%- endif -%}"
    "{%- set turns = messages[1:] -%}{%- else -%}{%- set turns = messages -%}{%- endif -%}"
    "{%- for message in turns -%}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' }}"
    "{%- if loop.first -%}{{ parts.prefix }}{%- endif -%}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{ part['text'] | trim }}"
    "{%- elif part['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)


def image_side(spec: TinySpec) -> int:
    """The square every image is resized to: the largest multiple of a pooled token's side within ``max_pixels``."""
    token_side = PATCH_SIZE * POOL
    _, max_pixels = spec.pixel_budget(PATCH_SIZE, POOL)
    return max(1, math.isqrt(max_pixels) // token_side) * token_side


@TINY_FAMILIES.register("gemma3")
def build_gemma3(spec: TinySpec) -> TinyModel:
    tokenizer = build_tokenizer(
        Qwen2Tokenizer,
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        plain_tokens=NEWLINE_RUNS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<bos>",
        add_bos_token=True,  # as Gemma's tokenizer: its template writes <bos> too, so prompts encode without it
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token=None,
        extra_special_tokens=IMAGE_TOKENS,
    )
    side = image_side(spec)
    tokens_per_image = (side // (PATCH_SIZE * POOL)) ** 2
    head_dim = spec.hidden_size // spec.num_heads
    text = decoder_config(
        spec, tokenizer, model_type="gemma3_text", head_dim=head_dim, query_pre_attn_scalar=head_dim,
        bos_token_id=tokenizer.bos_token_id, layer_types=_layer_types(spec.num_layers),
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": spec.rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": LOCAL_ROPE_THETA},
        },
    )
    vision = {
        "model_type": "siglip_vision_model",
        "hidden_size": spec.vision_hidden_size,
        "intermediate_size": spec.vision_intermediate_size,
        "num_hidden_layers": spec.vision_depth,
        "num_attention_heads": spec.vision_heads,
        "image_size": side,
        "patch_size": PATCH_SIZE,
        "vision_use_head": False,
    }
    config = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=tokens_per_image,
        boi_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKENS["boi_token"]),
        eoi_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKENS["eoi_token"]),
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKENS["image_token"]),
        tie_word_embeddings=spec.tie_word_embeddings,
    )
    processor = Gemma3Processor(
        image_processor=Gemma3ImageProcessor(size={"height": side, "width": side}, **SIGLIP_NORMALISATION),
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
        image_seq_length=tokens_per_image,
    )
    model = Gemma3ForConditionalGeneration(config)
    # transformers starts the projector at zero (a released checkpoint's is trained): the tiny policy would be blind
    model.model.multi_modal_projector.mm_input_projection_weight.data.normal_(0.0, config.initializer_range)
    model.generation_config = generation_config(tokenizer, STOP_TOKENS)
    return TinyModel(model, processor)


def _layer_types(num_layers: int) -> list[str]:
    """Gemma 3's pattern, five sliding-window layers to one global, ending on a global one in a short stack."""
    types = ["full_attention" if (layer + 1) % 6 == 0 else "sliding_attention" for layer in range(num_layers)]
    types[-1] = "full_attention"
    return types
