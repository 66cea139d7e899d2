"""New weights from the trainer to a vLLM server by a collective broadcast: no shared file system.

The trainer (rank 0) and the server's workers (ranks 1..N) form a process group of their own,
outside any group the trainer or vLLM already use: a TCP store the trainer hosts at
``rollout.server_sync_address``, then NCCL where CUDA is (the weights go GPU to GPU), gloo on
CPU. Each update, the trainer sends the weights' names, dtypes and shapes over HTTP and then
broadcasts the tensors in that order; each worker receives them into fresh tensors that feed
vLLM's in-place ``reload_weights``. :class:`WeightSyncWorker` is the server side, installed by
``mmgrpo rollout-serve`` as vLLM's ``--worker-extension-cls``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist

WeightMeta = tuple[str, str, list[int]]  # name, dtype ("bfloat16"), shape


def open_group(host: str, port: int, world_size: int, rank: int, timeout_s: float) -> dist.ProcessGroup:
    """Join the weight-sync group; rank 0 (the trainer) hosts its store. Blocks until every rank is in."""
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, world_size, rank == 0, timeout=timeout, wait_for_workers=False)
    if torch.cuda.is_available():
        return dist.ProcessGroupNCCL(store, rank, world_size)
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


def broadcast_from_trainer(group: dist.ProcessGroup, tensor: torch.Tensor) -> None:
    """Send (on rank 0) or receive into (elsewhere) ``tensor``."""
    options = dist.BroadcastOptions()
    options.rootRank = 0
    group.broadcast([tensor], options).wait()


def weight_meta(weights: dict[str, torch.Tensor]) -> list[WeightMeta]:
    """What the workers allocate before each broadcast, in broadcast order."""
    return [(name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape)) for name, tensor in weights.items()]


def send_weights(group: dist.ProcessGroup, weights: dict[str, torch.Tensor]) -> None:
    """Broadcast ``weights`` in :func:`weight_meta`'s order, on the group's device."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for tensor in weights.values():
        broadcast_from_trainer(group, tensor.detach().to(device).contiguous())


class WeightSyncWorker:
    """Methods vLLM adds to each of its workers (``--worker-extension-cls``), called by mmgrpo's
    endpoint plugin through ``collective_rpc``."""

    def mmgrpo_join(self, host: str, port: int, world_size: int, timeout_s: float) -> None:
        """Join the trainer's group as rank 1 + this worker's rank."""
        self.mmgrpo_group = open_group(host, port, world_size, 1 + self.rank, timeout_s)

    def mmgrpo_receive(self, meta: Sequence[WeightMeta]) -> None:
        """Receive the broadcast weights and load them in place."""
        self.model_runner.reload_weights(weights_iterator=self._mmgrpo_received(meta))

    def _mmgrpo_received(self, meta: Sequence[WeightMeta]) -> Iterator[tuple[str, torch.Tensor]]:
        for name, dtype, shape in meta:
            tensor = torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
            broadcast_from_trainer(self.mmgrpo_group, tensor)
            yield name, tensor
