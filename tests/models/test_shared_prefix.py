"""Group-shared prompt encoding gives the plain path's log-probs AND parameter gradients."""

from __future__ import annotations

import pytest
import torch

from mmgrpo.models.adapters import adapter_for
from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.shared_prefix import completion_logprobs, grouped_logprobs

ATOL = 1e-5
GROUP_SIZES = (3, 1, 2)  # unequal groups (dynamic group size)
COMPLETION_LENGTHS = (4, 6, 1, 5, 2, 3)  # ragged, one single-token completion


def random_completions(lengths=COMPLETION_LENGTHS, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (length,), generator=generator).tolist() for length in lengths]


def assert_grad_close(actual: torch.Tensor, expected: torch.Tensor, name: str) -> None:
    """Equal up to float32 rounding, which grows with a gradient's scale (the tiny Gemma 3's projector's is 2e4)."""
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(actual, expected, atol=ATOL * scale, rtol=1e-4, msg=name)


def logprobs_and_grads(model, compute, weights: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Log-probs of ``compute()`` and the gradients of ``sum(logp * weights)``."""
    model.zero_grad(set_to_none=True)
    logp, _ = compute()
    (logp * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return logp.detach(), grads


@pytest.mark.parametrize(
    ("family", "modality"),
    [("qwen2_5_vl", "image"), ("qwen2_vl", "image"), ("internvl", "image"), ("gemma3", "image"),
     ("glm4v", "image"), ("glm4v", "video"), ("glm4v_moe", "image"), ("glm46v", "video"), ("llava_onevision", "image"),
     ("qwen3_5", "image"), ("qwen3_5", "video"), ("qwen3_5_moe", "image"),
     ("qwen3_vl_moe", "image"), ("qwen3_vl_moe", "video"),
     ("qwen2_5_omni_thinker", "image"), ("qwen2_5_omni_thinker", "audio"),
     ("qwen3_omni_moe_thinker", "image"), ("qwen3_omni_moe_thinker", "audio")],
)
def test_grouped_logprobs_and_gradients_equal_plain_path(family, modality, load_tiny, media_samples) -> None:
    model, processor = load_tiny(family)
    prompts = build_prompt_batch(processor, media_samples(family, modality), family=family)
    assert not prompts.attention_mask.all()  # prompts of different lengths: left padding present
    completions = random_completions()
    weights = torch.randn(len(completions), max(COMPLETION_LENGTHS), generator=torch.Generator().manual_seed(1))

    def compute(shared: bool):
        return lambda: completion_logprobs(
            model, prompts, completions, GROUP_SIZES, group_shared_encoding=shared, micro_batch_size=len(completions)
        )

    plain_logp, plain_grads = logprobs_and_grads(model, compute(False), weights)
    shared_logp, shared_grads = logprobs_and_grads(model, compute(True), weights)

    torch.testing.assert_close(shared_logp, plain_logp, atol=ATOL, rtol=0)
    assert plain_grads.keys() == shared_grads.keys()
    assert any(name.startswith(adapter_for(family).tower_prefixes) for name in shared_grads)  # gradients reach it
    for name, grad in plain_grads.items():
        assert_grad_close(shared_grads[name], grad, name)


def test_grouped_micro_batches_and_entropy_match_one_forward(load_tiny, media_samples) -> None:
    model, processor = load_tiny("qwen2_5_vl")
    prompts = build_prompt_batch(processor, media_samples("qwen2_5_vl"), family="qwen2_5_vl")
    completions = random_completions()
    with torch.no_grad():
        whole = grouped_logprobs(model, prompts, completions, GROUP_SIZES, micro_batch_size=6, statistic="entropy")
        per_group = grouped_logprobs(model, prompts, completions, GROUP_SIZES, micro_batch_size=1, statistic="entropy")
        plain = completion_logprobs(
            model, prompts, completions, GROUP_SIZES, group_shared_encoding=False, micro_batch_size=2,
            statistic="entropy",
        )
    for logp, entropy in (per_group, plain):
        torch.testing.assert_close(logp, whole[0], atol=ATOL, rtol=0)
        torch.testing.assert_close(entropy, whole[1], atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava_onevision", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"])
def test_grouped_video_and_image_groups(family, load_tiny, media_samples, video_sample, video_budgets) -> None:
    model, processor = load_tiny(family)
    samples = [video_sample, media_samples(family)[2]]
    prompts = build_prompt_batch(processor, samples, video_budgets, family=family)
    completions = random_completions((3, 5, 2))
    with torch.no_grad():
        shared, _ = completion_logprobs(model, prompts, completions, (2, 1), micro_batch_size=1)
        plain, _ = completion_logprobs(
            model, prompts, completions, (2, 1), group_shared_encoding=False, micro_batch_size=3
        )
    torch.testing.assert_close(shared, plain, atol=ATOL, rtol=0)


def test_group_sizes_must_cover_prompts_and_completions(load_tiny, media_samples) -> None:
    model, processor = load_tiny("qwen2_5_vl")
    prompts = build_prompt_batch(processor, media_samples("qwen2_5_vl"), family="qwen2_5_vl")
    with pytest.raises(ValueError, match="group sizes sum to 5 but there are 6 completions"):
        grouped_logprobs(model, prompts, random_completions(), (3, 1, 1), micro_batch_size=4)
    with pytest.raises(ValueError, match="2 group sizes for 3 prompts"):
        grouped_logprobs(model, prompts, random_completions(), (3, 3), micro_batch_size=4)

