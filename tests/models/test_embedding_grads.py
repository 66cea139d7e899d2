"""Sparse token-embedding lookups: the dense path's gradients, as one dense tensor, on tied and untied tables."""

from __future__ import annotations

import pytest
import torch

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.shared_prefix import completion_logprobs
from mmgrpo.trainer.backends.base import OptimizerSpec
from mmgrpo.trainer.backends.single import SingleProcessBackend

from tests.models.test_shared_prefix import COMPLETION_LENGTHS, GROUP_SIZES, logprobs_and_grads, random_completions


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied-to-the-head"])
def test_sparse_lookups_give_the_dense_gradients(tied, tiny_model_dir, media_samples) -> None:
    model, processor = load_model_and_processor(tiny_model_dir("qwen2_5_vl", tie_word_embeddings=tied),
                                                dtype="float32")
    table = model.get_input_embeddings().weight
    assert (table is model.get_output_embeddings().weight) == tied
    prompts = build_prompt_batch(processor, media_samples("qwen2_5_vl"), family="qwen2_5_vl")
    completions = random_completions()
    weights = torch.randn(len(completions), max(COMPLETION_LENGTHS), generator=torch.Generator().manual_seed(1))

    def compute():  # group-shared: the prompts and the completions are looked up in two forwards
        return completion_logprobs(model.eval(), prompts, completions, GROUP_SIZES, group_shared_encoding=True,
                                   micro_batch_size=len(completions))

    _, dense = logprobs_and_grads(model, compute, weights)
    arriving = []
    table.register_hook(lambda grad: arriving.append(grad.layout))
    SingleProcessBackend(model.train(), OptimizerSpec(lr=1e-3, weight_decay=0.0, total_steps=1))
    _, sparse = logprobs_and_grads(model, compute, weights)

    assert arriving == [torch.strided if tied else torch.sparse_coo]  # untied: only the lookups' rows arrive
    assert sparse.keys() == dense.keys()
    for name, grad in dense.items():
        assert sparse[name].layout == torch.strided, name
        torch.testing.assert_close(sparse[name], grad, atol=1e-6, rtol=1e-5, msg=name)
