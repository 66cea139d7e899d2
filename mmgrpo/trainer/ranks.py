"""Which process this is among the ranks a launcher started, for the run's set-up around the
trainer (data, SFT, evaluation, outputs), before and beside the training back end.

Every rank runs the same job; files are written by the main process only, and what every
rank reads from a shared cache (generated datasets, tiny models) is built by the main
process first.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from mmgrpo.config.validation import launched_world_size
from mmgrpo.trainer.backends.base import init_process_group


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world_size: int = 1

    @classmethod
    def join(cls, timeout_seconds: float) -> Ranks:
        """This process's place among the launched ranks (joining their process group), or the only one."""
        if launched_world_size() == 1:
            return cls()
        init_process_group(timeout_seconds)
        return cls(torch.distributed.get_rank(), torch.distributed.get_world_size())

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world_size > 1:
            torch.distributed.barrier()

    @contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first (e.g. builds a shared cache), then the others."""
        if not self.is_main_process:
            self.barrier()
        yield
        if self.is_main_process:
            self.barrier()

    def share_main_weights(self, model: torch.nn.Module) -> None:
        """Every rank takes the main process's weights (replicated work, e.g. SFT, may differ in the last bits)."""
        if self.world_size == 1:
            return
        for tensor in model.state_dict().values():
            torch.distributed.broadcast(tensor.data, src=0)
