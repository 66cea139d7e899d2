"""Micro-batches by token budget: whole groups balanced by tokens, the same count on every rank, the same update."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from mmgrpo.config.schema import TrainConfig
from mmgrpo.distributed import Ranks
from mmgrpo.models import shared_prefix
from mmgrpo.trainer.chunks import budget_bins, token_budget_chunks
from tests.trainer import backend_parity


def test_budget_bins_fill_the_least_filled_bin_that_has_room() -> None:
    assert budget_bins([50, 40, 30, 20, 10], count=1, budget=60) == [[0], [1, 4], [2, 3]]
    assert budget_bins([70, 10], count=1, budget=60) == [[0], [1]]  # over the budget: a bin of its own
    assert budget_bins([5, 5, 5], count=4, budget=60) == [[0], [1], [2], []]  # a count agreed with other ranks


@dataclass(frozen=True)
class OtherRankNeeds(Ranks):
    """One process whose "max" over ranks sees another rank needing ``chunks`` micro-batches."""

    chunks: int = 1

    def all_reduce(self, values, op="sum"):  # noqa: ANN001, ANN201
        assert op == "max"
        return {key: max(value, self.chunks) for key, value in values.items()}


@pytest.mark.parametrize(("other", "expected"), [(1, 2), (3, 3), (5, 5)])
def test_every_rank_runs_the_count_the_busiest_needs(other, expected) -> None:
    """Groups of 2, 1 and 3 completions costing 50, 40 and 30 tokens under a budget of 80: two micro-batches
    here ([50], [40 + 30]), spread over more when another rank needs more, repeats past this rank's groups."""
    backend = SimpleNamespace(ranks=OtherRankNeeds(chunks=other))
    chunks = token_budget_chunks(backend, [2, 1, 3], [50, 40, 30], budget=80)
    assert len(chunks) == expected
    counted = [chunk for chunk in chunks if chunk.counts]
    assert sorted(p for chunk in counted for p in chunk.rows) == [0, 1, 2]  # every group exactly once
    parts = {tuple(chunk.rows): chunk.part for chunk in counted}
    assert parts.get((0,)) == [0, 1] and parts.get((2,), [3, 4, 5]) == [3, 4, 5]
    assert all(not chunk.counts and chunk.rows == chunks[0].rows for chunk in chunks[len(counted):])


@pytest.mark.parametrize("options", [{"max_tokens_per_micro_batch": 50}, {"max_tokens_per_micro_batch": 100},
                                     {"max_tokens_per_micro_batch": 100, "padding_free": True}],
                         ids=["one-group-each", "two-groups-each", "two-groups-each-packed"])
def test_token_budget_update_equals_count_based_update(options, tiny_qwen25vl) -> None:
    """The split changes, the loss the update follows does not (each micro-batch weighted by its share)."""
    expected, expected_metrics = backend_parity.train_on_fixed_rollouts(
        tiny_qwen25vl, TrainConfig(micro_batch_size=backend_parity.MICRO_BATCH)
    )
    weights, metrics = backend_parity.train_on_fixed_rollouts(
        tiny_qwen25vl, TrainConfig(micro_batch_size=backend_parity.MICRO_BATCH, **options)
    )
    worst = max(float((weights[name] - expected[name]).abs().max()) for name in expected)
    assert worst <= 1e-5
    for name in ("loss", "kl", "entropy", "clip_frac", "grad_norm"):
        assert metrics[name] == pytest.approx(expected_metrics[name], rel=1e-5), name


def test_the_head_runs_on_chunks_of_the_configured_size_and_the_update_is_unchanged(tiny_qwen25vl, monkeypatch):
    """``train.logprob_chunk_tokens`` bounds the tokens whose vocabulary logits exist at once; the update is the
    same (each token's log-prob is its own)."""
    expected, _ = backend_parity.train_on_fixed_rollouts(tiny_qwen25vl, TrainConfig(micro_batch_size=4))
    sizes = []
    original = shared_prefix.token_logprobs
    monkeypatch.setattr(shared_prefix, "token_logprobs",
                        lambda *args, chunk_size, **kwargs: sizes.append(chunk_size) or original(
                            *args, chunk_size=chunk_size, **kwargs))
    weights, _ = backend_parity.train_on_fixed_rollouts(tiny_qwen25vl, TrainConfig(micro_batch_size=4,
                                                                                   logprob_chunk_tokens=3))
    assert sizes and set(sizes) == {3}
    assert max(float((weights[name] - expected[name]).abs().max()) for name in expected) <= 1e-5  # matmul blocking
