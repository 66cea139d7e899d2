"""A rank that uses its process group as an FSDP2 run does (a DTensor op on a device mesh, which DTensor's
sharding caches keep), then leaves as a finished run does; it prints how many of gloo's worker threads are
still alive and how many groups outlived their release. ``--held-by-objects``: also kept as DeepSpeed keeps its
groups (a module global, an object's attribute, a list attribute). ``--import-after-init``:
``torch.distributed.nn.functional`` first imported once the group exists (its default arguments then hold it)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

from mmgrpo.distributed import Ranks, init_process_group

GLOO_WORKER = "pt_gloo_runloop"  # the name gloo's process group gives its worker threads
WORLD_GROUP = None  # set by --held-by-objects


class Engine:
    """Holds the group as an engine does."""

    def __init__(self, group: torch.distributed.ProcessGroup) -> None:
        self.data_parallel_group = group
        self.sub_groups = [group]


def gloo_workers() -> int:
    """How many of this process's threads are gloo process-group workers (Linux: /proc)."""
    return sum((task / "comm").read_text().strip() == GLOO_WORKER for task in Path("/proc/self/task").iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--held-by-objects", action="store_true")
    parser.add_argument("--import-after-init", action="store_true")
    args = parser.parse_args()
    if args.import_after_init:
        sys.modules.pop("torch.distributed.nn.functional", None)
    init_process_group(60)
    if args.import_after_init:
        importlib.import_module("torch.distributed.nn.functional")
    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    sharded = DTensor.from_local(torch.ones(2, 4), mesh, [Shard(0)])
    total = (sharded + 1).full_tensor().sum().item()
    if args.held_by_objects:
        global WORLD_GROUP
        WORLD_GROUP = torch.distributed.group.WORLD
        engine = Engine(WORLD_GROUP)  # noqa: F841  alive until the end, as a run's engine may be
    during = gloo_workers()
    del mesh, sharded
    outlived = Ranks.of_process_group().leave()
    print(f"total={total} gloo workers during={during} after={gloo_workers()} outlived={outlived}")


if __name__ == "__main__":
    main()
