"""Which process this is among the ranks a launcher (torchrun, accelerate, ``mmgrpo train --nproc``)
started, and the default process group they share.

Below the trainer and eval in the layers: training uses it for its set-up around the back end
(data, SFT, outputs), evaluation to split items over ranks (``mmgrpo eval`` under torchrun).
Every rank runs the same job; files are written by the main process only, and what every rank
reads from a shared cache (generated datasets, tiny models) is built by the main process first.
"""

from __future__ import annotations

import datetime
import gc
import logging
import os
import socket
import weakref
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.distributed.nn.functional  # noqa: F401  before any group exists: see release_process_groups

from mmgrpo.config.validation import launched_world_size

logger = logging.getLogger(__name__)

ReduceOp = Literal["sum", "mean", "max", "min"]


def one_process_group_unless_launched() -> None:
    """Started without a launcher (plain ``python``): set what torchrun would for a group of one."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    one = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for name, value in one.items():
        os.environ.setdefault(name, value)


def init_process_group(timeout_seconds: float) -> None:
    """The default process group, unless one exists: NCCL where CUDA is, else gloo. A collective
    that waits longer than ``timeout_seconds`` (a rank crashed or hangs) raises instead of hanging."""
    if torch.distributed.is_initialized():
        return
    one_process_group_unless_launched()
    if torch.cuda.is_available():  # NCCL: one GPU per rank on each node
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group(
        backend="nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=timeout_seconds)
    )


def release_process_groups() -> int:
    """Destroy every process group, and free their communication back ends now, while the interpreter is whole;
    returns how many outlived this. ``destroy_process_group`` only forgets the groups: a gloo back end lives, its
    worker threads with it, while anything still holds its group, and one of those threads that drops a
    collective's Python-owned tensor once the interpreter is finalizing kills the process ("terminate called
    without an active exception", SIGABRT after the run's work was done). Holders seen: a ``DeviceMesh`` that
    DTensor's sharding caches keep (FSDP2); DeepSpeed's engine, optimizer and parameters (kept alive by their
    hooks) and its module-level world group; ``torch.distributed.nn.functional``'s default arguments when that
    module is first imported after a group exists (imported first, above). The destroyed groups can serve no
    one, so every attribute and module global still pointing at one lets go of it."""
    from torch.distributed.distributed_c10d import _world

    groups = [weakref.ref(group) for group in _world.pg_map]
    torch.distributed.destroy_process_group()
    gc.collect()  # reference cycles of a finished run's model, optimizer and engine
    try:
        _drop_references([group for group in (ref() for ref in groups) if group is not None])
    except Exception:  # a finished run's clean-up: never its failure (the threads then stay until the exit)
        logger.warning("could not release every reference to the destroyed process groups", exc_info=True)
    outlived = sum(ref() is not None for ref in groups)
    if outlived:
        logger.info("%d process group(s) still referenced after destroy_process_group: their threads stay "
                    "until the process exits", outlived)
    return outlived


def _drop_references(dead: list[Any]) -> None:
    """Every object's attribute (a module's global included) that is one of the ``dead`` objects becomes None,
    and so does such an item of a list, tuple or dict attribute (positions and keys kept). ``dead`` holds them
    until the end, so that no other object can take one's identity meanwhile."""
    ids = {id(thing) for thing in dead}
    if not ids:
        return
    for thing in gc.get_objects():
        try:
            attributes = object.__getattribute__(thing, "__dict__")
        except (AttributeError, TypeError):
            continue
        if type(attributes) is not dict or isinstance(thing, type):  # a class's namespace is a read-only proxy
            continue
        for name, value in list(attributes.items()):
            if id(value) in ids:
                attributes[name] = None
            elif type(value) is list and any(id(item) in ids for item in value):
                value[:] = [None if id(item) in ids else item for item in value]
            elif type(value) is tuple and any(id(item) in ids for item in value):
                attributes[name] = tuple(None if id(item) in ids else item for item in value)
            elif type(value) is dict:
                for key in [key for key, item in list(value.items()) if id(item) in ids]:
                    value[key] = None


@dataclass(frozen=True)
class Ranks:
    """This process's place among the ranks, and the collectives over their default process group
    (each a no-op for a group of one). ``device``: where the communication back end reduces tensors
    (CPU for gloo, this rank's GPU for NCCL)."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def join(cls, timeout_seconds: float) -> Ranks:
        """This process's place among the launched ranks (joining their process group), or the only one."""
        if launched_world_size() == 1:
            return cls()
        init_process_group(timeout_seconds)
        return cls.of_process_group()

    @classmethod
    def of_process_group(cls, device: torch.device | None = None) -> Ranks:
        """This process in the default process group (which exists); ``device`` as the back end placed the model."""
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        return cls(torch.distributed.get_rank(), torch.distributed.get_world_size(), device)

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world_size > 1:
            torch.distributed.barrier()

    def leave(self) -> int:
        """End a finished run on several ranks: every rank done, then its process groups released; returns how
        many of those outlived their release (``release_process_groups``)."""
        if self.world_size > 1 and torch.distributed.is_initialized():
            torch.distributed.barrier()
            return release_process_groups()
        return 0

    @contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first (e.g. builds a shared cache), then the others."""
        if not self.is_main_process:
            self.barrier()
        yield
        if self.is_main_process:
            self.barrier()

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable, small), in rank order, on every rank."""
        if self.world_size == 1:
            return [value]
        values: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(values, value)
        return values

    def broadcast_object(self, value: Any) -> Any:
        """The main process's ``value`` on every rank."""
        if self.world_size == 1:
            return value
        box = [value]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def all_reduce(self, values: Mapping[str, float], op: ReduceOp = "sum") -> dict[str, float]:
        """``values`` reduced over all ranks with ``op``, in one collective; every rank passes the same
        keys and gets the result."""
        names = sorted(values)
        if self.world_size == 1 or not names:
            return dict(values)
        packed = torch.tensor([float(values[name]) for name in names], dtype=torch.float64, device=self.device)  # [K]
        torch_op = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}[op]
        torch.distributed.all_reduce(packed, op=getattr(torch.distributed.ReduceOp, torch_op))
        if op == "mean":
            packed /= self.world_size
        return dict(zip(names, packed.tolist()))

    def all_ranks(self, flag: bool) -> bool:
        """True when ``flag`` is true on every rank (every rank gets the answer)."""
        return self.all_reduce({"flag": float(flag)}, "min")["flag"] == 1.0

    def share_main_weights(self, model: torch.nn.Module) -> None:
        """Every rank takes the main process's weights (replicated work, e.g. SFT, may differ in the last bits)."""
        if self.world_size == 1:
            return
        for tensor in model.state_dict().values():
            torch.distributed.broadcast(tensor.data, src=0)
