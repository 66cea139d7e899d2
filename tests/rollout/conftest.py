"""Rollout fixtures: the tiny Qwen2.5-VL policy, a peaked copy of it, image prompts."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import PreTrainedModel, ProcessorMixin

from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.types import Sample

# Random tiny weights give a near-uniform policy whose greedy path stops after a token or
# two; scaling the language model's matrices makes greedy paths long and prompt-dependent.
PEAKED_WEIGHT_SCALE = 8.0


@pytest.fixture(scope="module")
def policy(tiny_qwen25vl: Path) -> tuple[PreTrainedModel, ProcessorMixin]:
    """The default tiny Qwen2.5-VL in fp32 and its processor."""
    return load_model_and_processor(tiny_qwen25vl)


def peaked_copy(model: PreTrainedModel) -> PreTrainedModel:
    """A copy of ``model`` with ``PEAKED_WEIGHT_SCALE`` x the matrices of its language model."""
    model = copy.deepcopy(model)
    weights = [*model.get_decoder().parameters(), model.get_output_embeddings().weight]
    with torch.no_grad():
        for weight in {id(w): w for w in weights}.values():  # a tied head is scaled once
            if weight.dim() == 2:
                weight.mul_(PEAKED_WEIGHT_SCALE)
    return model


@pytest.fixture(scope="session")
def make_peaked() -> Callable[[PreTrainedModel], PreTrainedModel]:
    """:func:`peaked_copy`, for tests that build their own models."""
    return peaked_copy


@pytest.fixture(scope="module")
def peaked_model(policy: tuple[PreTrainedModel, ProcessorMixin]) -> PreTrainedModel:
    """The policy made peaked (see :func:`peaked_copy`)."""
    return peaked_copy(policy[0])


def image_sample(sample_id: str, size: tuple[int, int], question: str, seed: int) -> Sample:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    content = [{"type": "image", "image": Image.fromarray(pixels)}, {"type": "text", "text": question}]
    return Sample(id=sample_id, task="test", messages=[{"role": "user", "content": content}])


@pytest.fixture(scope="module")
def samples() -> list[Sample]:
    """Three image prompts of different lengths (image sizes and questions differ)."""
    return [
        image_sample("a", (112, 112), "How many red cubes are there?", seed=0),
        image_sample("b", (84, 56), "Count.", seed=1),
        image_sample("c", (112, 84), "What is shown in this picture? Describe it in one sentence.", seed=2),
    ]
