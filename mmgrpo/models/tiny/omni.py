"""Tiny Qwen2.5-Omni thinker: Qwen2.5-VL's vision tower, a Whisper-style audio tower and a Qwen2 text model
with time-aligned multimodal rotary positions (TMRoPE).

Only the thinker (text out, ``model_type`` ``qwen2_5_omni_thinker``) is built and saved: it is the policy
that trains. The talker and token2wav (speech out) of a full ``qwen2_5_omni`` checkpoint neither train nor
take part in a text reward, so they are left out of the tiny checkpoint, as they are of a saved policy.

Turns are ChatML with Qwen's default system prompt; an image is ``<|vision_bos|><|IMAGE|><|vision_eos|>``,
a video ``<|vision_bos|><|VIDEO|><|vision_eos|>``, an audio clip ``<|audio_bos|><|AUDIO|><|audio_eos|>``,
as in the released checkpoints; the processor expands the placeholder to one token per merged 28-px patch
(4-16 per image by default) or per 40 ms of audio (a clip of S seconds: 25 S tokens).
"""

from __future__ import annotations

from transformers import (
    Qwen2_5OmniProcessor,
    Qwen2_5OmniThinkerConfig,
    Qwen2_5OmniThinkerForConditionalGeneration,
    Qwen2Tokenizer,
    WhisperFeatureExtractor,
)

from mmgrpo.models.tiny.audio import MEL_FRAMES_PER_SECOND, SAMPLE_RATE, amplify_audio_input, audio_encoder_config
from mmgrpo.models.compat import omni_thinker_holds_towers
from mmgrpo.models.tiny.families import TINY_FAMILIES, TinyModel, TinySpec, generation_config
from mmgrpo.models.tiny.qwen import (
    QWEN2_DEFAULT_SYSTEM,
    QWEN2_PATCH_SIZE,
    QWEN_STOP_TOKENS,
    qwen2_image_processor,
    qwen2_video_processor,
    qwen_text_config,
    windowed_vision_tower,
)
from mmgrpo.models.tiny.templates import chat_template
from mmgrpo.models.tiny.tokenizer import build_tokenizer

# The names Qwen2.5-Omni's tokenizer gives its media tokens (the processor reads them as attributes).
MEDIA_TOKENS = {
    "image_token": "<|IMAGE|>",
    "video_token": "<|VIDEO|>",
    "audio_token": "<|AUDIO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
}
# In the released tokenizer's order (ids 151643-151656 there).
SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>", "<|box_end|>",
    "<|quad_start|>", "<|quad_end|>", "<|vision_bos|>", "<|vision_eos|>", "<|vision_pad|>", "<|IMAGE|>", "<|VIDEO|>",
    "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
)  # fmt: skip
MEDIA_MARKUP = {
    "image": "<|vision_bos|><|IMAGE|><|vision_eos|>",
    "video": "<|vision_bos|><|VIDEO|><|vision_eos|>",
    "audio": "<|audio_bos|><|AUDIO|><|audio_eos|>",
}
# Thinker config field -> token, as the released config names them.
CONFIG_TOKENS = {
    "image_token_id": "<|IMAGE|>",
    "video_token_id": "<|VIDEO|>",
    "audio_token_id": "<|AUDIO|>",
    "vision_start_token_id": "<|vision_bos|>",
    "vision_end_token_id": "<|vision_eos|>",
    "audio_start_token_id": "<|audio_bos|>",
    "audio_end_token_id": "<|audio_eos|>",
}
AUDIO_WINDOW_SECONDS = 2  # the audio tower attends within windows of 2 s (n_window = 100 frames per half)


def build_qwen2_5_omni(spec: TinySpec) -> TinyModel:
    tokenizer = build_tokenizer(
        Qwen2Tokenizer,
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        chat_template=chat_template(media_markup=MEDIA_MARKUP, default_system=QWEN2_DEFAULT_SYSTEM),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        extra_special_tokens=MEDIA_TOKENS,
    )
    audio = {
        **audio_encoder_config(spec),
        "n_window": AUDIO_WINDOW_SECONDS * MEL_FRAMES_PER_SECOND // 2,
        "output_dim": spec.hidden_size,
    }
    config = Qwen2_5OmniThinkerConfig(
        text_config=qwen_text_config(spec, tokenizer),
        vision_config=windowed_vision_tower(spec),
        audio_config=audio,
        **{key: tokenizer.convert_tokens_to_ids(token) for key, token in CONFIG_TOKENS.items()},
    )
    feature_extractor = WhisperFeatureExtractor(
        feature_size=spec.audio_num_mel_bins,
        sampling_rate=SAMPLE_RATE,
        chunk_length=spec.audio_max_seconds,
        return_attention_mask=True,
    )
    processor = Qwen2_5OmniProcessor(
        image_processor=qwen2_image_processor(spec, QWEN2_PATCH_SIZE),
        video_processor=qwen2_video_processor(spec, QWEN2_PATCH_SIZE),
        feature_extractor=feature_extractor,
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
    )
    model = Qwen2_5OmniThinkerForConditionalGeneration(config)
    amplify_audio_input(model, spec.audio_conv_init_std)
    model.generation_config = generation_config(tokenizer, QWEN_STOP_TOKENS)
    return TinyModel(model, processor)


if omni_thinker_holds_towers():  # else the family is refused at load, and no tiny one is offered
    TINY_FAMILIES.add("qwen2_5_omni_thinker", build_qwen2_5_omni)
