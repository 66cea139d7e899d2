"""Fixtures for the batch / log-prob tests: loaded tiny models, media samples, a plain reference."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import PreTrainedModel, ProcessorMixin

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.types import Sample
from processors import VideoBudget

AUDIO_FAMILIES = {"qwen2_audio"}
LINEAR_ATTENTION_FAMILIES = {"qwen3_5", "qwen3_5_moe"}  # hybrid decoders: packed (padding-free) rows are refused
# (image height, width, question): different image sizes and texts give prompts of different lengths.
IMAGE_PROMPTS = (
    (112, 112, "How many red cubes are there?"),
    (84, 140, "Count"),
    (56, 56, "How many blue spheres are there in the picture? Think step by step."),
)
AUDIO_PROMPTS = ((1.0, "How many beeps?"), (0.5, "Count"), (0.75, "How many tones are there in the clip?"))
# A tiny video budget: 4 frames of at most 56 x 84 pixels.
TINY_VIDEO_BUDGET = VideoBudget(
    fps=2.0, min_frames=4, max_frames=4, min_pixels=28 * 28, max_pixels=56 * 84, total_pixels=4 * 56 * 84
)


@pytest.fixture(scope="session")
def load_tiny(tiny_model_dir: Callable[..., Path]) -> Callable[[str], tuple[PreTrainedModel, ProcessorMixin]]:
    """``load_tiny(family) -> (model in eval mode, fp32, processor)``, loaded once per session."""
    loaded: dict[str, tuple[PreTrainedModel, ProcessorMixin]] = {}

    def load(family: str) -> tuple[PreTrainedModel, ProcessorMixin]:
        if family not in loaded:
            model, processor = load_model_and_processor(tiny_model_dir(family), dtype="float32")
            loaded[family] = (model.eval(), processor)
        return loaded[family]

    return load


@pytest.fixture(scope="session")
def media_samples(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., list[Sample]]:
    """``media_samples(family, modality=None)``: three one-media prompts of different lengths: audio clips for an
    audio family or ``modality="audio"`` (Qwen2.5-Omni hears and sees), else images."""
    image_dir = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    image_samples = []
    for index, (height, width, question) in enumerate(IMAGE_PROMPTS):
        path = image_dir / f"image_{index}.png"
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path)
        image_samples.append(one_media_sample(f"img-{index}", "image", str(path), question))
    audio_samples = []
    for index, (seconds, question) in enumerate(AUDIO_PROMPTS):
        clip = rng.standard_normal(int(seconds * 16_000)).astype(np.float32) * 0.1
        audio_samples.append(one_media_sample(f"aud-{index}", "audio", (clip, 16_000), question))
    return lambda family, modality=None: (
        audio_samples if (modality or ("audio" if family in AUDIO_FAMILIES else "image")) == "audio" else image_samples
    )


@pytest.fixture(scope="session")
def video_sample() -> Sample:
    """A one-video prompt: 8 random 56 x 84 frames given as an array."""
    frames = np.random.default_rng(1).integers(0, 256, (8, 56, 84, 3), dtype=np.uint8)
    return one_media_sample("vid-0", "video", frames, "How many objects move?")


@pytest.fixture(scope="session")
def video_budgets() -> dict[str, VideoBudget]:
    """Media budgets keeping ``video_sample`` tiny."""
    return {"video": TINY_VIDEO_BUDGET}


def one_media_sample(sample_id: str, kind: str, ref: object, question: str) -> Sample:
    content = [{"type": kind, kind: ref}, {"type": "text", "text": question}]
    return Sample(id=sample_id, task="test", messages=[{"role": "user", "content": content}])


def reference_log_softmax(
    model: PreTrainedModel, processor: ProcessorMixin, sample: Sample, completion: list[int], budgets=None
) -> torch.Tensor:
    """Log-softmax ``[len(completion), V]`` predicting each completion token: ONE unbatched,
    unpadded forward of the full HF model (positions computed by transformers itself)."""
    prompt = build_prompt_batch(processor, [sample], budgets, family=model.config.model_type)
    inputs = prompt.model_inputs()
    prompt_length = prompt.input_ids.shape[1]
    inputs["input_ids"] = torch.cat([prompt.input_ids, torch.tensor([completion])], 1)
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    if "mm_token_type_ids" in inputs:  # text (0) over the completion
        inputs["mm_token_type_ids"] = torch.nn.functional.pad(inputs["mm_token_type_ids"], (0, len(completion)))
    with torch.no_grad():
        logits = model(**inputs).logits[0].float()  # [T, V]
    return logits[prompt_length - 1 : -1].log_softmax(-1)  # [Tc, V]


def reference_logprobs(model, processor, sample, completion, budgets=None) -> torch.Tensor:
    """Log-prob ``[len(completion)]`` of each completion token under the plain reference."""
    log_probs = reference_log_softmax(model, processor, sample, completion, budgets)
    return log_probs.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


@pytest.fixture(scope="session")
def reference() -> Callable[..., torch.Tensor]:
    """The plain reference: ``reference(model, processor, sample, completion, budgets=None) -> [Tc]``."""
    return reference_logprobs


@pytest.fixture(scope="session")
def reference_distribution() -> Callable[..., torch.Tensor]:
    """``reference_distribution(...) -> [Tc, V]`` log-softmax of the plain reference (for entropy)."""
    return reference_log_softmax
