"""Group-shared decoding equals plain ``generate`` on every tiny family (positions, caches, media)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.tiny import TINY_FAMILIES
from mmgrpo.rollout import HFEngine, SamplingParams
from mmgrpo.types import Sample

AUDIO_FAMILIES = {"qwen2_audio"}
AUDIO_RATE = 16_000
# Each tiny family with its modality; the Qwen-Omni thinkers see and hear, so they run with both.
FAMILY_MODALITIES = [
    *((family, "audio" if family in AUDIO_FAMILIES else "image") for family in TINY_FAMILIES.names()),
    ("qwen2_5_omni_thinker", "audio"),
    ("qwen3_omni_moe_thinker", "audio"),
]


def media_part(modality: str, size: int, seed: int) -> dict:
    """An image of side ``size`` px, or ``size`` / 100 seconds of noise."""
    rng = np.random.default_rng(seed)
    if modality == "audio":
        clip = (rng.standard_normal(size * AUDIO_RATE // 100) * 0.1).astype(np.float32)
        return {"type": "audio", "audio": (clip, AUDIO_RATE)}
    return {"type": "image", "image": Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))}


def family_samples(modality: str) -> list[Sample]:
    prompts = [(112, "How many red cubes are there?"), (56, "Count.")]
    return [
        Sample(
            id=str(i),
            task="test",
            messages=[
                {"role": "user", "content": [media_part(modality, size, i), {"type": "text", "text": q}]}
            ],
        )
        for i, (size, q) in enumerate(prompts)
    ]


@pytest.mark.parametrize(("family", "modality"), FAMILY_MODALITIES)
def test_group_shared_greedy_equals_plain_generate(family: str, modality: str, tiny_model_dir, make_peaked) -> None:
    model, processor = load_model_and_processor(tiny_model_dir(family))
    model = make_peaked(model)
    samples = family_samples(modality)
    params = SamplingParams(n=2, temperature=0, max_new_tokens=10)
    shared = HFEngine(model, processor).generate(samples, params)
    plain = HFEngine(model, processor, group_shared=False).generate(samples, params)
    assert [[c.token_ids for c in g] for g in shared] == [[c.token_ids for c in g] for g in plain]
    assert shared[0][0].token_ids != shared[1][0].token_ids
