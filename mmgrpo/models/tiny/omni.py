"""Tiny Qwen-Omni thinkers: a vision tower, an audio tower and a text model with time-aligned multimodal rotary
positions (TMRoPE).

- Qwen2.5-Omni (``qwen2_5_omni_thinker``): Qwen2.5-VL's vision tower (14-px patches), a Whisper-style audio tower
  and a dense Qwen2 decoder. An image is ``<|vision_bos|><|IMAGE|><|vision_eos|>``, a video
  ``<|vision_bos|><|VIDEO|><|vision_eos|>``, a clip ``<|audio_bos|><|AUDIO|><|audio_eos|>``; a clip of S seconds
  becomes 25 S tokens (one per 40 ms); Qwen's default system prompt.
- Qwen3-Omni (``qwen3_omni_moe_thinker``): Qwen3-VL's vision tower (16-px patches, learned positions, deepstack),
  an audio tower that downsamples each second of mel frames 8 times by three strided convolutions (13 tokens a
  second; its windows are fixed at 1 s, ``n_window`` 50, as the processor's token count assumes) and a mixture of
  experts decoder (2 of 4 routed experts per token). An image is ``<|vision_start|><|image_pad|><|vision_end|>``, a
  video ``<|vision_start|><|video_pad|><|vision_end|>``, a clip ``<|audio_start|><|audio_pad|><|audio_end|>``;
  Qwen3's template (no default system prompt, tools listed).

Only the thinker (text out) is built and saved: it is the policy that trains. The talker and the speech decoder of
a full checkpoint neither train nor take part in a text reward, so they are left out of the tiny checkpoint, as
they are of a saved policy. The processor expands each placeholder to one token per merged patch (4-16 per image
by default) or per audio step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from transformers import (
    PreTrainedModel,
    ProcessorMixin,
    Qwen2_5OmniProcessor,
    Qwen2_5OmniThinkerConfig,
    Qwen2_5OmniThinkerForConditionalGeneration,
    Qwen2Tokenizer,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
    Qwen3OmniMoeProcessor,
    Qwen3OmniMoeThinkerConfig,
    Qwen3OmniMoeThinkerForConditionalGeneration,
    WhisperFeatureExtractor,
)

from mmgrpo.models.compat import omni_thinker_holds_towers
from mmgrpo.models.tiny.audio import MEL_FRAMES_PER_SECOND, SAMPLE_RATE, amplify_audio_input, audio_encoder_config
from mmgrpo.models.tiny.families import TINY_FAMILIES, TinyModel, TinySpec, generation_config
from mmgrpo.models.tiny.qwen import (
    QWEN2_DEFAULT_SYSTEM,
    QWEN2_PATCH_SIZE,
    QWEN3_HALF_GREY,
    QWEN3_PATCH_SIZE,
    QWEN_STOP_TOKENS,
    init_vision_positions,
    qwen2_image_processor,
    qwen2_video_processor,
    qwen3_experts,
    qwen3_vision_tower,
    qwen_text_config,
    windowed_vision_tower,
)
from mmgrpo.models.tiny.templates import chat_template
from mmgrpo.models.tiny.tokenizer import build_tokenizer


class ThinkerTokens(NamedTuple):
    """A thinker's tokens as its released tokenizer and config name them."""

    special: tuple[str, ...]
    """Special tokens, in the released tokenizer's order."""
    named: Mapping[str, str]
    """Tokenizer attribute -> token (``image_token``, ``vision_bos_token``...: the processor reads them)."""
    markup: Mapping[str, str]
    """Modality -> what the chat template writes for one item."""
    config: Mapping[str, str]
    """Thinker config field -> token."""


class ThinkerParts(NamedTuple):
    """Where thinkers differ beyond their tokens: family fields of the text, vision and audio configs (the sizes
    come from the spec) and the image and video processors."""

    text: dict[str, Any]
    rope: dict[str, Any]
    vision: dict[str, Any]
    audio: dict[str, Any]
    image_processor: Qwen2VLImageProcessor
    video_processor: Qwen2VLVideoProcessor


def _thinker_tokens(
    special: tuple[str, ...], *, image: str, video: str, audio: str, vision: tuple[str, str], clip: tuple[str, str]
) -> ThinkerTokens:
    """A thinker's tokens from its placeholders and the (open, close) pairs around a vision item and a clip: both
    thinkers wrap each item the same way, and their processors read the same tokenizer attributes."""
    named = {"image_token": image, "video_token": video, "audio_token": audio,
             "vision_bos_token": vision[0], "vision_eos_token": vision[1],
             "audio_bos_token": clip[0], "audio_eos_token": clip[1]}
    markup = {"image": image.join(vision), "video": video.join(vision), "audio": audio.join(clip)}
    config = {"image_token_id": image, "video_token_id": video, "audio_token_id": audio,
              "vision_start_token_id": vision[0], "vision_end_token_id": vision[1],
              "audio_start_token_id": clip[0], "audio_end_token_id": clip[1]}
    return ThinkerTokens(special, named, markup, config)


QWEN2_5_OMNI_TOKENS = _thinker_tokens(
    (  # ids 151643-151656 in the released tokenizer
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>", "<|box_end|>",
        "<|quad_start|>", "<|quad_end|>", "<|vision_bos|>", "<|vision_eos|>", "<|vision_pad|>", "<|IMAGE|>",
        "<|VIDEO|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    ),
    image="<|IMAGE|>", video="<|VIDEO|>", audio="<|AUDIO|>", vision=("<|vision_bos|>", "<|vision_eos|>"),
    clip=("<|audio_bos|>", "<|audio_eos|>"),
)  # fmt: skip
QWEN3_OMNI_TOKENS = _thinker_tokens(
    (  # Qwen3-VL's (ids 151643-151656), then the audio ones (151669, 151670, 151675; the TTS ones between are left out)
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
        "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
        "<|image_pad|>", "<|video_pad|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>",
    ),
    image="<|image_pad|>", video="<|video_pad|>", audio="<|audio_pad|>", vision=("<|vision_start|>", "<|vision_end|>"),
    clip=("<|audio_start|>", "<|audio_end|>"),
)  # fmt: skip
AUDIO_WINDOW_SECONDS = 2  # Qwen2.5-Omni's audio tower attends within windows of 2 s (n_window = 100 frames per half)
# Its three downsampling convolutions and their projection to the tower's width: redrawn at the spec's std, the clip
# outweighs the sinusoidal positions added next (tests/models/test_tiny_audio_init.py).
QWEN3_OMNI_AUDIO_CONVS = ("conv2d1", "conv2d2", "conv2d3", "conv_out")
# Qwen3-Omni's time axis: 13 positions a second, as its released config numbers a video's temporal patches.
QWEN3_OMNI_POSITIONS_PER_SECOND = 13


def _assemble_thinker(
    spec: TinySpec,
    tokens: ThinkerTokens,
    classes: tuple[type, type[PreTrainedModel], type[ProcessorMixin]],
    *,
    default_system: str | None,
    renders_tools: bool,
    parts: ThinkerParts,
    audio_convs: tuple[str, ...],
    **config_extras: Any,
) -> TinyModel:
    """Tokenizer, processor, config and random model of a thinker. ``classes`` is (config, model, processor);
    ``audio_convs`` the audio tower's input layers, drawn at ``spec.audio_conv_init_std``."""
    config_class, model_class, processor_class = classes
    tokenizer = build_tokenizer(
        Qwen2Tokenizer,
        vocab_size=spec.vocab_size,
        special_tokens=tokens.special,
        chat_template=chat_template(media_markup=tokens.markup, default_system=default_system,
                                    renders_tools=renders_tools),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        extra_special_tokens=dict(tokens.named),
    )
    config = config_class(
        text_config=qwen_text_config(spec, tokenizer, **parts.rope) | parts.text,
        vision_config=parts.vision,
        audio_config={**audio_encoder_config(spec), "output_dim": spec.hidden_size, **parts.audio},
        **{key: tokenizer.convert_tokens_to_ids(token) for key, token in tokens.config.items()},
        **config_extras,
    )
    feature_extractor = WhisperFeatureExtractor(
        feature_size=spec.audio_num_mel_bins,
        sampling_rate=SAMPLE_RATE,
        chunk_length=spec.audio_max_seconds,
        return_attention_mask=True,
    )
    processor = processor_class(
        image_processor=parts.image_processor,
        video_processor=parts.video_processor,
        feature_extractor=feature_extractor,
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
    )
    model = model_class(config)
    amplify_audio_input(model, spec.audio_conv_init_std, audio_convs)
    model.generation_config = generation_config(tokenizer, QWEN_STOP_TOKENS)
    return TinyModel(model, processor)


def build_qwen2_5_omni(spec: TinySpec) -> TinyModel:
    """Qwen2.5-VL's windowed 14-px tower, a Whisper-style audio tower and a dense decoder."""
    parts = ThinkerParts(
        text={}, rope={}, vision=windowed_vision_tower(spec),
        audio={"n_window": AUDIO_WINDOW_SECONDS * MEL_FRAMES_PER_SECOND // 2},
        image_processor=qwen2_image_processor(spec, QWEN2_PATCH_SIZE),
        video_processor=qwen2_video_processor(spec, QWEN2_PATCH_SIZE),
    )
    return _assemble_thinker(
        spec, QWEN2_5_OMNI_TOKENS,
        (Qwen2_5OmniThinkerConfig, Qwen2_5OmniThinkerForConditionalGeneration, Qwen2_5OmniProcessor),
        default_system=QWEN2_DEFAULT_SYSTEM, renders_tools=False, parts=parts, audio_convs=("conv1", "conv2"),
    )


def build_qwen3_omni(spec: TinySpec) -> TinyModel:
    """Qwen3-VL's 16-px tower with one deepstack layer, Qwen3-Omni's chunked audio tower, routed experts."""
    parts = ThinkerParts(
        text=qwen3_experts(spec),  # no shared expert
        rope={"mrope_interleaved": True},
        vision=qwen3_vision_tower(spec, deepstack_visual_indexes=[0]),
        # 1-s chunks, as released: the processor's count of a clip's tokens holds for these only.
        audio={"n_window": MEL_FRAMES_PER_SECOND // 2, "downsample_hidden_size": spec.audio_hidden_size},
        image_processor=qwen2_image_processor(spec, QWEN3_PATCH_SIZE, **QWEN3_HALF_GREY),
        video_processor=qwen2_video_processor(spec, QWEN3_PATCH_SIZE, **QWEN3_HALF_GREY),
    )
    tiny = _assemble_thinker(
        spec, QWEN3_OMNI_TOKENS,
        (Qwen3OmniMoeThinkerConfig, Qwen3OmniMoeThinkerForConditionalGeneration, Qwen3OmniMoeProcessor),
        default_system=None, renders_tools=True, parts=parts, audio_convs=QWEN3_OMNI_AUDIO_CONVS,
        position_id_per_seconds=QWEN3_OMNI_POSITIONS_PER_SECOND,
    )
    init_vision_positions(tiny.model, spec)
    return tiny


for _model_type, _builder in (("qwen2_5_omni_thinker", build_qwen2_5_omni),
                              ("qwen3_omni_moe_thinker", build_qwen3_omni)):
    if omni_thinker_holds_towers(_model_type):  # else the family is refused at load, and no tiny one is offered
        TINY_FAMILIES.add(_model_type, _builder)
