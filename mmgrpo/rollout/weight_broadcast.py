"""New weights from the trainer to a vLLM server by a collective broadcast: no shared file system.

The trainer (rank 0) and the server's workers (ranks 1..N) form a process group of their own,
outside any group the trainer or vLLM already use: a TCP store the trainer hosts at
``rollout.server_sync_address``, then NCCL where CUDA is (the weights go GPU to GPU), gloo on
CPU. Each update, the trainer sends the weights' names, dtypes and shapes over HTTP and then
broadcasts the tensors in that order; each worker receives them into fresh tensors that feed
vLLM's in-place ``reload_weights``. :class:`WeightSyncWorker` is the server side, installed by
``mmgrpo rollout-serve`` as vLLM's ``--worker-extension-cls`` (and by the colocated engine); its
``mmgrpo_reload`` is the in-place reload every weight update goes through.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.distributed as dist

WeightMeta = tuple[str, str, list[int]]  # name, dtype ("bfloat16"), shape
WORKER_EXTENSION = "mmgrpo.rollout.weight_broadcast.WeightSyncWorker"
RELOAD_LOGGER = "vllm.model_executor.model_loader.reload"
LAYER_LOGGER = f"{RELOAD_LOGGER}.layerwise"  # a filter on the parent would not see its records
COMPUTED_LAYERS = ("RotaryEmbedding", "FusedMMInputNorm")
"""vLLM layers whose tensors it computes itself (rotary caches; the pixel normalisation's mean and std), never found
in a checkpoint: every reload sends them nothing, and vLLM's warning that they loaded no weights is no news."""


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


@contextmanager
def quiet_reload(partial: bool) -> Iterator[None]:
    """vLLM's expected warnings of a reload, silenced for that reload only: for a ``partial`` one (unchanged weights
    left out on purpose) those about each layer it was sent nothing for and its list of weights not sent; for any,
    those about the layers holding computed tensors only (:data:`COMPUTED_LAYERS`)."""
    reload_logger, layer_logger = logging.getLogger(RELOAD_LOGGER), logging.getLogger(LAYER_LOGGER)
    level = reload_logger.level
    if partial:
        reload_logger.setLevel(logging.ERROR)
    layer_logger.addFilter(_not_about_computed_layers)
    try:
        yield
    finally:
        layer_logger.removeFilter(_not_about_computed_layers)
        reload_logger.setLevel(level)


def _not_about_computed_layers(record: logging.LogRecord) -> bool:
    """False for vLLM's "LAYER: Failed to load weights" about a layer of :data:`COMPUTED_LAYERS`."""
    layer = record.args[0] if isinstance(record.args, tuple) and record.args else None
    return not (str(record.msg).endswith("Failed to load weights") and str(layer).endswith(COMPUTED_LAYERS))


CPU_EXPERTS_REFUSAL = (
    "vLLM's CPU build cannot take new weights for a mixture-of-experts model (its in-place reload leaves the "
    "experts' weights unpacked); sample with rollout.engine=hf on CPU, or run vLLM on GPUs"
)


def refuse_unpacked_cpu_experts(model: torch.nn.Module, device: torch.device) -> None:
    """Raise before an in-place reload that would leave a mixture of experts wrong: vLLM's CPU build (0.32, measured)
    packs the experts' weights for its kernel when a model loads, but its in-place reload leaves them unpacked, so
    every later sample would come from scrambled experts (log-probs 1e-2 from the trainer's, not 1e-6)."""
    if torch.device(device).type == "cpu" and any(hasattr(module, "w13_weight") for module in model.modules()):
        raise NotImplementedError(CPU_EXPERTS_REFUSAL)


class WeightSyncWorker:
    """Methods vLLM adds to each of its workers (``--worker-extension-cls``), called by mmgrpo's
    engines and endpoint plugin through ``collective_rpc``."""

    def mmgrpo_reload(self, partial: bool = False, **source: object) -> None:
        """vLLM's in-place ``reload_weights`` from ``source`` (``weights_iterator`` or ``weights_path``); a
        ``partial`` one leaves the layers it is sent nothing for as they are."""
        refuse_unpacked_cpu_experts(self.model_runner.model, self.device)
        with quiet_reload(partial):
            self.reload_weights(**source)

    def mmgrpo_join(self, host: str, port: int, world_size: int, timeout_s: float) -> None:
        """Join the trainer's group as rank 1 + this worker's rank."""
        self.mmgrpo_group = open_group(host, port, world_size, 1 + self.rank, timeout_s)

    def mmgrpo_receive(self, meta: Sequence[WeightMeta], partial: bool = False) -> None:
        """Receive the broadcast weights and load them in place (``partial``: see :meth:`mmgrpo_reload`)."""
        self.mmgrpo_reload(partial, weights_iterator=self._mmgrpo_received(meta))

    def _mmgrpo_received(self, meta: Sequence[WeightMeta]) -> Iterator[tuple[str, torch.Tensor]]:
        for name, dtype, shape in meta:
            tensor = torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
            broadcast_from_trainer(self.mmgrpo_group, tensor)
            yield name, tensor
