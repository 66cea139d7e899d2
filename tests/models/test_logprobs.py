"""Per-token log-probs of the plain path equal one unbatched HF forward, for every tiny family."""

from __future__ import annotations

import pytest
import torch

from mmgrpo.models.train_batch import build_train_batch
from mmgrpo.models.logprobs import head_calls_for, sequence_logprobs, token_logprobs
from mmgrpo.models.tiny import TINY_FAMILIES
from mmgrpo.types import Sample
from tests.models.conftest import LINEAR_ATTENTION_FAMILIES

ATOL = 1e-5
COMPLETION_LENGTHS = (4, 1, 6, 3)
PROMPT_OF = (0, 1, 2, 0)  # completion i continues prompt PROMPT_OF[i]; prompt 0 twice


def random_completions(lengths=COMPLETION_LENGTHS, seed: int = 0) -> list[list[int]]:
    """Byte-level token ids: never a special or placeholder token."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (length,), generator=generator).tolist() for length in lengths]


@pytest.mark.parametrize("padding_free", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("family", TINY_FAMILIES.names())
def test_logprobs_equal_unbatched_reference(family, padding_free, load_tiny, media_samples, reference) -> None:
    """Padded, or packed into rows without padding (:mod:`mmgrpo.models.packing`): the same log-probs."""
    model, processor = load_tiny(family)
    samples = [media_samples(family)[p] for p in PROMPT_OF]
    completions = random_completions()
    batch = build_train_batch(processor, samples, completions, family=model.config.model_type)
    if padding_free and family in LINEAR_ATTENTION_FAMILIES:  # a recurrent state would run across packed rows
        with pytest.raises(ValueError, match="linear-attention"):
            sequence_logprobs(model, batch, micro_batch_size=len(samples), padding_free=True)
        return

    with torch.no_grad():
        logp, _ = sequence_logprobs(model, batch, micro_batch_size=len(samples), padding_free=padding_free)

    assert logp.shape == (len(samples), max(COMPLETION_LENGTHS))
    for row, (sample, completion) in enumerate(zip(samples, completions)):
        expected = reference(model, processor, sample, completion)
        torch.testing.assert_close(logp[row, : len(completion)], expected, atol=ATOL, rtol=0)
        assert not logp[row, len(completion) :].any()  # padding stays 0


@pytest.mark.parametrize(
    ("family", "modality"),
    [*((family, "image") for family in ("qwen2_5_vl", "smolvlm", "internvl", "gemma3", "glm4v", "glm4v_moe", "glm46v",
                                         "llava_onevision", "qwen3_5", "qwen3_vl_moe", "qwen3_omni_moe_thinker")),
     ("qwen2_5_omni_thinker", "audio"), ("qwen3_omni_moe_thinker", "audio")],  # clips of 1, 0.5 and 0.75 s
)
def test_logprobs_invariant_to_batch_composition_and_padding(family, modality, load_tiny, media_samples) -> None:
    model, processor = load_tiny(family)
    samples = media_samples(family, modality)
    completions = random_completions((5, 2, 3))
    full = build_train_batch(processor, samples, completions, family=family)
    with torch.no_grad():
        together, _ = sequence_logprobs(model, full, micro_batch_size=3)
        one_by_one, _ = sequence_logprobs(model, full, micro_batch_size=1)
        # The shortest prompt alone has no left padding; in the full batch it has plenty.
        alone, _ = sequence_logprobs(
            model, build_train_batch(processor, samples[1:2], completions[1:2], family=family), micro_batch_size=1
        )
    torch.testing.assert_close(together, one_by_one, atol=ATOL, rtol=0)
    torch.testing.assert_close(together[1, :2], alone[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "family",
    ["qwen2_5_vl", "smolvlm", "internvl", "gemma3", "glm4v", "llava_onevision", "qwen2_5_omni_thinker",
     "qwen3_omni_moe_thinker"],
)
def test_rows_with_several_images_match_unbatched_reference(family, load_tiny, media_samples, reference) -> None:
    """Two images in one row beside one image in another: each row's media features reach its own
    placeholders (per-item media selected and concatenated in row order)."""
    model, processor = load_tiny(family)
    one, two, three = media_samples(family)
    both = Sample(id="two-images", task="test", messages=[{"role": "user", "content": [
        *one.messages[0]["content"][:1], *two.messages[0]["content"]]}])
    samples = [three, both, both]
    completions = random_completions((3, 4, 2))
    batch = build_train_batch(processor, samples, completions, family=family)
    assert batch.prompt.media_counts == [{"image": 1}, {"image": 2}, {"image": 2}]
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, batch, micro_batch_size=2)  # a micro-batch splits the two-image rows
    for row, (sample, completion) in enumerate(zip(samples, completions)):
        expected = reference(model, processor, sample, completion)
        torch.testing.assert_close(logp[row, : len(completion)], expected, atol=ATOL, rtol=0)


def test_entropy_chunks_and_temperature_match_reference(load_tiny, media_samples, reference_distribution) -> None:
    model, processor = load_tiny("qwen2_5_vl")
    samples = media_samples("qwen2_5_vl")[:2]
    completions = random_completions((5, 3))
    batch = build_train_batch(processor, samples, completions, family="qwen2_5_vl")
    temperature = 0.7
    with torch.no_grad():
        logp, entropy = sequence_logprobs(
            model, batch, micro_batch_size=2, statistic="entropy", chunk_size=3, temperature=temperature
        )
    for row, (sample, completion) in enumerate(zip(samples, completions)):
        log_probs = reference_distribution(model, processor, sample, completion)  # [Tc, V] at temperature 1
        tempered = (log_probs / temperature).log_softmax(-1)  # log_softmax(logits / T)
        expected_logp = tempered.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)
        expected_entropy = -(tempered.exp() * tempered).sum(-1)
        torch.testing.assert_close(logp[row, : len(completion)], expected_logp, atol=ATOL, rtol=0)
        torch.testing.assert_close(entropy[row, : len(completion)], expected_entropy, atol=ATOL, rtol=0)


def test_video_logprobs_through_qwen2_5_vl(load_tiny, media_samples, video_sample, video_budgets, reference) -> None:
    model, processor = load_tiny("qwen2_5_vl")
    samples = [video_sample, media_samples("qwen2_5_vl")[0]]  # a video row batched with an image row
    completions = random_completions((4, 2))
    batch = build_train_batch(processor, samples, completions, video_budgets, family="qwen2_5_vl")
    assert "pixel_values_videos" in batch.prompt.media_inputs
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, batch, micro_batch_size=1)  # micro-batches split video from image
    for row, (sample, completion) in enumerate(zip(samples, completions)):
        expected = reference(model, processor, sample, completion, video_budgets)
        torch.testing.assert_close(logp[row, : len(completion)], expected, atol=ATOL, rtol=0)


def test_gradients_flow_into_vision_tower(load_tiny, media_samples) -> None:
    model, processor = load_tiny("qwen2_5_vl")
    batch = build_train_batch(
        processor, media_samples("qwen2_5_vl")[:2], random_completions((3, 2)), family="qwen2_5_vl"
    )
    model.zero_grad(set_to_none=True)
    logp, _ = sequence_logprobs(model, batch, micro_batch_size=2, chunk_size=2)
    logp.sum().backward()
    vision_grads = [p.grad for name, p in model.named_parameters() if ".visual." in f".{name}"]
    assert vision_grads and all(g is not None for g in vision_grads)
    assert any(g.abs().sum() > 0 for g in vision_grads)
    model.zero_grad(set_to_none=True)


def test_token_logprobs_only_computes_masked_positions() -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 11, bias=False)
    hidden = torch.randn(2, 4, 8)
    targets = torch.randint(0, 11, (2, 4))
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    logp, entropy = token_logprobs(head, hidden, targets, mask, statistic="entropy", chunk_size=2)
    log_probs = head(hidden).log_softmax(-1)  # [2, 4, 11]
    expected = log_probs.gather(-1, targets[..., None]).squeeze(-1) * mask
    torch.testing.assert_close(logp, expected)
    torch.testing.assert_close(entropy, -(log_probs.exp() * log_probs).sum(-1) * mask)


def test_head_calls_agreed_with_other_ranks_run_the_head_that_often_forward_and_backward() -> None:
    """A rank whose tokens need fewer chunks than another's still calls the head as often (on no tokens), in the
    forward and in the backward's recomputation: under ZeRO-3 and FSDP2 each call is a gather all ranks join."""
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 11, bias=False)
    calls = []
    head.register_forward_hook(lambda module, args, output: calls.append(len(args[0])))
    hidden = torch.randn(2, 4, 8, requires_grad=True)
    targets, mask = torch.randint(0, 11, (2, 4)), torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    assert head_calls_for(mask, 3) == 2  # what this rank tells the others it needs
    logp, _ = token_logprobs(head, hidden, targets, mask, chunk_size=3, head_calls=4)  # what another rank needs
    assert calls == [3, 1, 0, 0]
    logp.sum().backward()
    assert calls[4:] == [0, 0, 1, 3]  # each chunk recomputed, the last first
    alone, _ = token_logprobs(head, hidden.detach(), targets, mask, chunk_size=3)
    torch.testing.assert_close(logp.detach(), alone)
    (expected,) = torch.autograd.grad(token_logprobs(head, hidden, targets, mask, chunk_size=4)[0].sum(), hidden)
    torch.testing.assert_close(hidden.grad, expected)


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpointed-head", "plain-head"])
def test_only_the_differentiable_entropy_carries_a_gradient(checkpointed) -> None:
    """The logged entropy is the bonus's value but without a backward through the [tokens, vocab] passes; the
    bonus's entropy has the gradient of the entropy computed by hand."""
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 11, bias=False)
    hidden = torch.randn(2, 4, 8, requires_grad=checkpointed)  # a grad-requiring input: the head is checkpointed
    targets, mask = torch.randint(0, 11, (2, 4)), torch.ones(2, 4)
    logp, logged = token_logprobs(head, hidden, targets, mask, statistic="entropy", chunk_size=3)
    _, bonus = token_logprobs(head, hidden, targets, mask, statistic="differentiable_entropy", chunk_size=3)
    assert logp.requires_grad and not logged.requires_grad and bonus.requires_grad
    assert not any("Softmax" in name for name in graph_nodes(logp))  # nor does the log-prob's backward pass
    torch.testing.assert_close(logged, bonus.detach())
    (grad,) = torch.autograd.grad(bonus.sum(), head.weight)
    log_probs = head(hidden).log_softmax(-1)
    (expected,) = torch.autograd.grad(-(log_probs.exp() * log_probs).sum(), head.weight)
    torch.testing.assert_close(grad, expected)


def graph_nodes(tensor: torch.Tensor) -> set[str]:
    """The names of the autograd nodes ``tensor``'s backward runs."""
    seen, todo = {}, [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and id(node) not in seen:
            seen[id(node)] = node.name()
            todo.extend(next_node for next_node, _ in node.next_functions)
    return set(seen.values())
