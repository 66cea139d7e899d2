"""The tiny Qwen2-Audio and Qwen3-Omni thinker hear their input at init, and the cache key follows the init."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import soundfile
import torch

from data_recipes.generators.audio_count import AudioCount
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.tiny import TinySpec, tiny_identity

CLIPS = 8
CLIP_SECONDS = 3


def beep_clips(count: int) -> list[np.ndarray]:
    """``count`` generated beep clips (1-6 beeps over noise), as float samples."""
    rng = np.random.default_rng(0)
    return [soundfile.read(io.BytesIO(AudioCount().example(rng).media.data))[0] for _ in range(count)]


def between_clip_share(hidden: torch.Tensor) -> float:
    """Share of the encoder output's variance ``[clips, tokens, dim]`` that differs between clips
    at the same token position (0 = every clip looks the same, 1 = only the clip matters)."""
    between = hidden.var(dim=0).sum(-1).mean()
    total = (hidden - hidden.mean(dim=(0, 1))).pow(2).sum(-1).mean()
    return float(between / total)


def test_audio_encoder_output_depends_on_the_clip(tiny_model_dir) -> None:
    """transformers' default init (conv std 0.02) gives a share of ~0.03: a policy that cannot hear."""
    model, processor = load_model_and_processor(tiny_model_dir("qwen2_audio", audio_max_seconds=CLIP_SECONDS))
    features = processor.feature_extractor(beep_clips(CLIPS), sampling_rate=16_000, return_tensors="pt")
    with torch.no_grad():
        hidden = model.model.audio_tower(features["input_features"]).last_hidden_state
    assert between_clip_share(hidden) > 0.5


def test_the_qwen3_omni_moe_thinker_audio_tower_output_depends_on_the_clip(tiny_model_dir) -> None:
    """Its sinusoidal positions (amplitude 1) drown the clips under transformers' init (a share of ~4e-8) and under
    the three convolutions alone redrawn (0.18); with their output projection redrawn too: ~0.7."""
    thinker = tiny_model_dir("qwen3_omni_moe_thinker", audio_max_seconds=CLIP_SECONDS)
    model, processor = load_model_and_processor(thinker)
    features = processor.feature_extractor(beep_clips(CLIPS), sampling_rate=16_000, return_tensors="pt",
                                           return_attention_mask=True)
    with torch.no_grad():
        hidden = model.model.get_audio_features(features["input_features"], features["attention_mask"])
    assert between_clip_share(hidden.last_hidden_state.view(CLIPS, -1, model.config.text_config.hidden_size)) > 0.5


def test_tiny_cache_identity_covers_every_spec_default() -> None:
    """A changed spec default (an init, a size) must change the key a built tiny model is cached under."""
    identity = tiny_identity("qwen2_audio", seed=3, hidden_size=32)
    spec_fields = {field.name: getattr(TinySpec(), field.name) for field in dataclasses.fields(TinySpec)}
    expected = {"family": "qwen2_audio", "seed": 3, **spec_fields, "hidden_size": 32}
    assert identity.items() >= expected.items()
