"""Group-shared encoding under gradient checkpointing: the same log-probs and gradients, layers replayed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.compat import enable_activation_checkpointing
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.replay_cache import ReplayLayer, ReplayLinearLayer
from mmgrpo.models.shared_prefix import completion_logprobs, grouped_logprobs

from tests.models.test_shared_prefix import ATOL, assert_grad_close, logprobs_and_grads, random_completions

GROUP_SIZES = (3, 2)  # two groups of different sizes
COMPLETION_LENGTHS = (4, 6, 1, 5, 3)
MEDIA_TOWERS = ("visual.", "vision_model.", "vision_tower.", "audio_tower.")


def checkpointed_model(tiny_model_dir, family: str, reentrant: bool = False):
    """An own fp32 copy of the tiny ``family`` with activation checkpointing on (it acts in training mode only)."""
    model, processor = load_model_and_processor(tiny_model_dir(family), dtype="float32")
    enable_activation_checkpointing(model, {"use_reentrant": reentrant})
    return model, processor


@pytest.mark.parametrize(
    "family",
    ["qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_5", "smolvlm", "internvl", "gemma3", "glm4v", "llava_onevision",
     "qwen2_audio",
     "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"],
)
def test_checkpointed_shared_step_equals_unchecked_and_unshared(
    family, tiny_model_dir, media_samples, monkeypatch
) -> None:
    model, processor = checkpointed_model(tiny_model_dir, family)
    prompts = build_prompt_batch(processor, media_samples(family)[:2], family=family)
    completions = random_completions(COMPLETION_LENGTHS)
    weights = torch.randn(len(completions), max(COMPLETION_LENGTHS), generator=torch.Generator().manual_seed(1))
    updates = 0

    def counted(update: Callable) -> Callable:
        def counted_update(self, *args, **kwargs):
            nonlocal updates
            updates += 1
            return update(self, *args, **kwargs)
        return counted_update

    # One update per layer and pass: keys and values, or a linear-attention layer's recurrent state.
    monkeypatch.setattr(ReplayLayer, "update", counted(ReplayLayer.update))
    monkeypatch.setattr(ReplayLinearLayer, "update_recurrent_state", counted(ReplayLinearLayer.update_recurrent_state))

    def run(*, shared: bool, checkpointed: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
        """Log-probs, gradients and cache updates of one forward + backward."""
        nonlocal updates
        updates = 0
        model.train(checkpointed)  # transformers checkpoints in training mode only; the tiny models have no dropout
        compute: Callable = lambda: completion_logprobs(  # noqa: E731
            model, prompts, completions, GROUP_SIZES, group_shared_encoding=shared, micro_batch_size=len(completions)
        )
        return (*logprobs_and_grads(model, compute, weights), updates)

    logp, grads, replayed_updates = run(shared=True, checkpointed=True)
    shared_logp, shared_grads, forward_updates = run(shared=True, checkpointed=False)
    plain_logp, plain_grads, _ = run(shared=False, checkpointed=False)

    layers = model.config.get_text_config().num_hidden_layers
    assert forward_updates == 2 * layers  # the prompt pass, then the completion pass
    assert replayed_updates == 2 * forward_updates  # backward replayed every layer of both passes
    assert any(tower in name for name in grads for tower in MEDIA_TOWERS)  # gradients reach the media tower
    assert not any(getattr(m, "_can_checkpoint_with_cache", False) for m in model.modules())  # flag removed again
    for reference_logp, reference_grads in ((shared_logp, shared_grads), (plain_logp, plain_grads)):
        torch.testing.assert_close(logp, reference_logp, atol=ATOL, rtol=0)
        assert grads.keys() == reference_grads.keys()
        for name, grad in reference_grads.items():
            assert_grad_close(grads[name], grad, name)


def test_reentrant_checkpointing_is_refused(tiny_model_dir, media_samples) -> None:
    """Reentrant checkpointing would give the cached prompt states no gradient from the completions."""
    model, processor = checkpointed_model(tiny_model_dir, "qwen2_5_vl", reentrant=True)
    model.train()
    prompts = build_prompt_batch(processor, media_samples("qwen2_5_vl")[:1], family="qwen2_5_vl")
    with pytest.raises(RuntimeError, match="use_reentrant=False"):
        grouped_logprobs(model, prompts, [[1, 2, 3]], (1,), micro_batch_size=1)


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpointed", "unchecked"])
def test_a_one_token_continuation_carries_the_linear_attention_state(
    checkpointed, tiny_model_dir, media_samples
) -> None:
    """Completions of at most 2 tokens continue their prompt by one token, where transformers' convolution takes
    its one-token decode path (it writes the window in place): Qwen3.5's linear-attention layers must still see
    their prompt's window and state, in the forward and in every replay."""
    model, processor = checkpointed_model(tiny_model_dir, "qwen3_5")
    prompts = build_prompt_batch(processor, media_samples("qwen3_5")[:2], family="qwen3_5")
    completions = random_completions((2, 1, 2, 2, 1))
    weights = torch.randn(len(completions), 2, generator=torch.Generator().manual_seed(1))
    model.train(checkpointed)

    def run(shared: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return logprobs_and_grads(model, lambda: completion_logprobs(
            model, prompts, completions, GROUP_SIZES, group_shared_encoding=shared, micro_batch_size=len(completions)
        ), weights)

    (logp, grads), (plain_logp, plain_grads) = run(shared=True), run(shared=False)
    torch.testing.assert_close(logp, plain_logp, atol=ATOL, rtol=0)
    for name, grad in plain_grads.items():
        assert_grad_close(grads[name], grad, name)
