"""Padding-free training: a GRPO step and SFT steps on packed rows equal the padded ones."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from mmgrpo.inputs import media_budgets
from mmgrpo.trainer.setup import demonstrator
from mmgrpo.trainer.sft import run_sft
from tests.e2e.test_training_paths import _step_with_probes
from tests.trainer.test_sft_tool_demonstrations import zoom_setup  # noqa: F401 (a fixture)


@pytest.mark.parametrize(
    "options",
    [
        ("train.group_shared_encoding=false",),
        ("train.group_shared_encoding=true",),
        ("train.group_shared_encoding=true", "train.gradient_checkpointing=true"),
    ],
    ids=["plain", "group-shared", "group-shared-checkpointed"],
)
def test_packed_step_equals_padded_step(small_config, tmp_path, options):
    options = (*options, "algo.beta=0.04", "rollout.max_new_tokens=24", "seed=1")  # seed 1: some stop early
    padded, padded_grads, _ = _step_with_probes(small_config(*options), tmp_path / "padded")
    packed, packed_grads, _ = _step_with_probes(small_config(*options, "train.padding_free=true"), tmp_path / "packed")
    assert padded["length/max"] > padded["length/mean"]  # rows of different lengths
    for key in ("reward/total", "loss", "grad_norm", "kl", "entropy"):
        assert packed[key] == pytest.approx(padded[key], rel=1e-5, abs=1e-7), key
    assert padded_grads and padded_grads.keys() == packed_grads.keys()
    for name, grad in padded_grads.items():
        assert torch.allclose(packed_grads[name], grad, rtol=1e-4, atol=1e-7), name


def test_packed_sft_on_tool_demonstrations_equals_padded(zoom_setup):  # noqa: F811
    """SFT rows of different lengths, each with a crop returned inside its answer: same losses packed."""
    config, model, processor, examples = zoom_setup
    losses = {}
    for padding_free in (False, True):
        sft = dataclasses.replace(config.sft, steps=2, batch_size=4, micro_batch_size=4, padding_free=padding_free)
        policy = copy.deepcopy(model)
        rows = run_sft(policy, processor, examples, sft, budgets=media_budgets(config.model, processor), seed=0,
                       progress_bar=False, demonstrate=demonstrator(config, policy, processor))
        losses[padding_free] = [row["sft/loss"] for row in rows]
    assert len(losses[False]) == 2
    assert losses[True] == pytest.approx(losses[False], rel=1e-5)

