"""The dummy media pass runs the tower on a text-only forward without changing any log-prob or gradient."""

from __future__ import annotations

import pytest
import torch

from mmgrpo.models.adapters import adapter_for
from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.dummy_media import install_dummy_media_pass
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.shared_prefix import completion_logprobs
from mmgrpo.types import Sample
from tests.models.test_shared_prefix import COMPLETION_LENGTHS, GROUP_SIZES, logprobs_and_grads, random_completions

FAMILIES = (
    "qwen2_5_vl", "qwen3_vl", "qwen3_5", "smolvlm", "internvl", "gemma3", "glm4v", "llava_onevision", "qwen2_audio",
    "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker",
)


def text_samples() -> list[Sample]:
    questions = ("What is 2 + 3?", "Add", "What is seven times six? Think step by step.")
    return [Sample(id=f"txt-{i}", task="test", messages=[{"role": "user", "content": q}])
            for i, q in enumerate(questions)]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("shared", [True, False], ids=["group-shared", "plain"])
def test_a_text_only_forward_runs_the_tower_and_changes_nothing_else(family, shared, tiny_model_dir) -> None:
    model, processor = load_model_and_processor(tiny_model_dir(family), dtype="float32")  # own copy: hooks stay here
    model.eval()
    prompts = build_prompt_batch(processor, text_samples(), family=family)
    assert not prompts.media_inputs
    completions = random_completions()
    weights = torch.randn(len(completions), max(COMPLETION_LENGTHS), generator=torch.Generator().manual_seed(1))

    def compute():
        return completion_logprobs(
            model, prompts, completions, GROUP_SIZES, group_shared_encoding=shared, micro_batch_size=len(completions)
        )

    plain_logp, plain_grads = logprobs_and_grads(model, compute, weights)
    dummy = install_dummy_media_pass(model)
    assert dummy is not None and install_dummy_media_pass(model) is dummy  # installed once
    dummy_logp, dummy_grads = logprobs_and_grads(model, compute, weights)

    adapter = adapter_for(family)
    assert dummy.runs == len(adapter.tower_inputs)  # each kind once; the group-shared continuation runs none
    assert torch.equal(dummy_logp, plain_logp)  # bit-equal
    tower = {name for name in dummy_grads if name.startswith(adapter.tower_prefixes + adapter.projector_prefixes)}
    assert tower and not tower & plain_grads.keys()  # the tower is used now, and only now
    assert all(not dummy_grads[name].any() for name in tower)  # with zero gradients
    assert dummy_grads.keys() - tower == plain_grads.keys()
    for name, grad in plain_grads.items():
        assert torch.equal(dummy_grads[name], grad), name


def test_a_forward_with_images_runs_only_the_video_dummy_and_changes_nothing(tiny_model_dir, media_samples) -> None:
    """Qwen-VL runs its tower once for images and once for videos: an image-only forward gets the video dummy."""
    model, processor = load_model_and_processor(tiny_model_dir("qwen2_5_vl"), dtype="float32")
    model.eval()
    prompts = build_prompt_batch(processor, media_samples("qwen2_5_vl"), family="qwen2_5_vl")
    completions = random_completions()
    weights = torch.randn(len(completions), max(COMPLETION_LENGTHS), generator=torch.Generator().manual_seed(1))

    def compute():
        return completion_logprobs(model, prompts, completions, GROUP_SIZES, micro_batch_size=len(completions))

    plain_logp, plain_grads = logprobs_and_grads(model, compute, weights)
    dummy = install_dummy_media_pass(model)
    dummy_logp, dummy_grads = logprobs_and_grads(model, compute, weights)
    assert dummy.runs == 1
    assert torch.equal(dummy_logp, plain_logp)
    assert dummy_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        assert torch.equal(dummy_grads[name], grad), name


def test_a_family_without_a_known_tower_gets_no_pass(tiny_model_dir) -> None:
    model, _ = load_model_and_processor(tiny_model_dir("qwen2_5_vl"), dtype="float32")
    model.config.model_type = "unknown_family"  # the generic adapter knows no tower
    assert install_dummy_media_pass(model) is None
