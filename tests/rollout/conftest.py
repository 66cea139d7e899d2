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

from mmgrpo.models.train_batch import build_train_batch
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.types import Completion, Sample

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


def recompute_logprobs(
    model: PreTrainedModel,
    processor: ProcessorMixin,
    samples: list[Sample],
    groups: list[list[Completion]],
    *,
    temperature: float = 1.0,
    forbidden_ids: tuple[int, ...] = (),
    budgets: object = None,
    causal_images: bool = False,
) -> list[torch.Tensor]:
    """Log-probs of each completion's tokens from one plain forward over prompt + completion,
    under the policy with ``forbidden_ids`` masked and divided by ``temperature``. ``causal_images``: an image's
    tokens attend causally, not both ways (no ``token_type_ids``), as vLLM's CPU attention runs Gemma 3."""
    rows = [(sample, completion) for sample, group in zip(samples, groups) for completion in group]
    batch = build_train_batch(
        processor, [s for s, _ in rows], [c.token_ids for _, c in rows], budgets, family=model.config.model_type
    )
    with torch.no_grad():
        inputs = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.model_inputs().items()}
        if causal_images:
            inputs["token_type_ids"] = torch.zeros_like(inputs["token_type_ids"])
        logits = model(**inputs).logits.cpu()  # [N, Tp + Tc, V]
    completion_logits = logits[
        :, batch.prompt_length - 1 : -1
    ].float()  # [N, Tc, V], position t predicts token t
    completion_logits[..., list(forbidden_ids)] = float("-inf")
    completion_logits /= temperature
    logprobs = torch.log_softmax(completion_logits, -1).gather(-1, batch.completion_ids[..., None])
    return [logprobs[row, : len(c.token_ids), 0] for row, (_, c) in enumerate(rows)]


@pytest.fixture(scope="session")
def teacher_forced_logprobs() -> Callable[..., list[torch.Tensor]]:
    """:func:`recompute_logprobs`: what the trainer computes for completions an engine sampled."""
    return recompute_logprobs
