"""The rollout worker's shared weights cross to its process however many tensors a policy has: one buffer per
dtype crosses (the fork server passes fewer than 256 file descriptors with a process), and what the trainer
publishes afterwards is what the worker reads, not a copy made at its start."""

from __future__ import annotations

import time

import torch

from mmgrpo.trainer.rollout_worker import SharedWeights, worker_context

TENSORS = 300  # a 3B VLM has about 800


def _sum_once_published(weights: SharedWeights, results) -> None:  # noqa: ANN001
    while weights.version != 1:
        time.sleep(0.01)
    results.put({name: tensor.sum().item() for name, tensor in weights.tensors.items()})


def test_a_worker_reads_what_is_published_after_it_started():
    context = worker_context()
    named = [(f"layer.{index}", torch.full((2, 3), float(index))) for index in range(TENSORS)]
    named += [("half", torch.ones(4, dtype=torch.float16)), ("scalar", torch.tensor(7.0))]
    weights = SharedWeights(named, version=0, context=context)
    results = context.Queue()
    worker = context.Process(target=_sum_once_published, args=(weights, results), daemon=True)
    worker.start()
    weights.publish(((name, 2 * tensor) for name, tensor in named), 1, after_taken=0, check_worker=lambda: None)
    sums = results.get(timeout=120)
    worker.join(60)
    assert sums == {name: 2 * tensor.sum().item() for name, tensor in named}
    assert weights.tensors["half"].dtype == torch.float16 and weights.tensors["scalar"].shape == ()
