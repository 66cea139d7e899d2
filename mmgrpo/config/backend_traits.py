"""What each training back end reads of the ``train`` section and supports, declared where config
validation can ask before torch is imported (``mmgrpo.config`` stays importable without it).

Each back-end class in ``mmgrpo.trainer.backends`` carries its entry as ``traits``; a test keeps the
two registries one-to-one. A new back end is one entry here beside its class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mmgrpo.config.schema import TrainConfig


@dataclass(frozen=True)
class BackendTraits:
    """One back end's declaration: the back-end-specific ``train`` keys it reads, the precisions it
    trains in (with why another is not supported yet), and whether it shards the weights."""

    keys: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ("fp32", "bf16", "fp16")
    not_yet: Mapping[str, str] = field(default_factory=dict)  # precision -> why not yet
    shards: Callable[[TrainConfig], bool] = lambda train: False

    def shards_weights(self, train: TrainConfig) -> bool:
        """Whether no rank holds the whole model under ``train`` (forward passes gather weights)."""
        return self.shards(train)


BACKEND_TRAITS: dict[str, BackendTraits] = {
    "single": BackendTraits(),
    "deepspeed": BackendTraits(
        keys=("train.zero_stage", "train.deepspeed_config", "train.offload_optimizer", "train.collective_timeout_s",
              "train.offload_parameters"),
        shards=lambda train: train.zero_stage == 3,
    ),
    "fsdp2": BackendTraits(
        keys=("train.offload_optimizer", "train.collective_timeout_s"),
        precisions=("fp32", "bf16"),
        not_yet={"fp16": "its gradients are sharded DTensors the loss scaler does not unscale"},
        shards=lambda train: True,
    ),
}


def backend_specific_keys() -> dict[str, list[str]]:
    """Each back-end-specific key with the back ends that read it, in declaration order."""
    readers: dict[str, list[str]] = {}
    for name, traits in BACKEND_TRAITS.items():
        for key in traits.keys:
            readers.setdefault(key, []).append(name)
    return readers


def backends_supporting(precision: str) -> list[str]:
    return [name for name, traits in BACKEND_TRAITS.items() if precision in traits.precisions]
