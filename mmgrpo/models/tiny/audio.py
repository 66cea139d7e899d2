"""Tiny Qwen2-Audio: a Whisper-style audio encoder feeding a Qwen2 text model.

Audio is 16 kHz mono, turned into log-mel features by a ``WhisperFeatureExtractor``
padded to ``TinySpec.audio_max_seconds``; each clip becomes ``<|audio_bos|>`` + one
``<|AUDIO|>`` per 40 ms + ``<|audio_eos|>`` in the prompt.
"""

from __future__ import annotations

import torch
from transformers import (
    PreTrainedModel,
    Qwen2AudioConfig,
    Qwen2AudioForConditionalGeneration,
    Qwen2AudioProcessor,
    Qwen2Tokenizer,
    WhisperFeatureExtractor,
)

from mmgrpo.models.tiny.families import TINY_FAMILIES, TinyModel, TinySpec, decoder_config, generation_config
from mmgrpo.models.tiny.templates import chat_template
from mmgrpo.models.tiny.tokenizer import build_tokenizer

SAMPLE_RATE = 16_000
MEL_FRAMES_PER_SECOND = 100  # Whisper hop of 160 samples at 16 kHz
ENCODER_STRIDE = 2  # the encoder's second convolution halves the frame rate
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
DEFAULT_SYSTEM = "You are a helpful assistant."


@TINY_FAMILIES.register("qwen2_audio")
def build_qwen2_audio(spec: TinySpec) -> TinyModel:
    tokenizer = build_tokenizer(
        Qwen2Tokenizer,
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        chat_template=chat_template(
            media_markup={"audio": "<|audio_bos|><|AUDIO|><|audio_eos|>\n"}, default_system=DEFAULT_SYSTEM
        ),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    text = decoder_config(spec, tokenizer, model_type="qwen2")
    audio = audio_encoder_config(spec)
    config = Qwen2AudioConfig(
        audio_config=audio, text_config=text, audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>")
    )
    feature_extractor = WhisperFeatureExtractor(
        feature_size=spec.audio_num_mel_bins,
        sampling_rate=SAMPLE_RATE,
        chunk_length=spec.audio_max_seconds,
        return_attention_mask=True,
    )
    processor = Qwen2AudioProcessor(
        feature_extractor=feature_extractor, tokenizer=tokenizer, chat_template=tokenizer.chat_template
    )
    model = Qwen2AudioForConditionalGeneration(config)
    amplify_audio_input(model, spec.audio_conv_init_std)
    model.generation_config = generation_config(tokenizer, STOP_TOKENS)
    return TinyModel(model, processor)


def audio_encoder_config(spec: TinySpec) -> dict[str, int]:
    """The Whisper-style audio encoder's sizes (Qwen2-Audio's, and Qwen2.5-Omni's thinker's before its extras)."""
    return {
        "num_mel_bins": spec.audio_num_mel_bins,
        "encoder_layers": spec.audio_layers,
        "encoder_attention_heads": spec.audio_heads,
        "encoder_ffn_dim": 2 * spec.audio_hidden_size,
        "d_model": spec.audio_hidden_size,
        "max_source_positions": spec.audio_max_seconds * MEL_FRAMES_PER_SECOND // ENCODER_STRIDE,
    }


def amplify_audio_input(model: PreTrainedModel, std: float, convs: tuple[str, ...] = ("conv1", "conv2")) -> None:
    """Redraw the audio encoder's (``model.model.audio_tower``: Qwen2-Audio, the Qwen-Omni thinkers) input layers
    ``convs`` (its convolutions; Qwen3-Omni's also their output projection) with weights of ``std`` (bias stays 0).

    With transformers' init (std 0.02) the convolutions' output (std ~0.006 on beep clips) is
    weaker than the clip-independent position embedding added to it (std 0.02), so the
    encoder's output hardly depends on the clip and a random tiny model cannot learn to hear
    (``TinySpec.audio_conv_init_std``).
    """
    tower = model.model.audio_tower
    with torch.no_grad():
        for conv in convs:
            getattr(tower, conv).weight.normal_(0.0, std)
