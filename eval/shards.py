"""Data-parallel evaluation: each rank takes one contiguous block of the items (by item order), and
every rank's outcomes are gathered back into item order, so N ranks give what one rank gives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from mmgrpo.distributed import Ranks

T = TypeVar("T")
V = TypeVar("V")


def shard(items: Sequence[T], ranks: Ranks) -> list[T]:
    """This rank's block of ``items``: ranks take consecutive blocks whose sizes differ by at most one."""
    size, extra = divmod(len(items), ranks.world_size)
    start = ranks.rank * size + min(ranks.rank, extra)
    return list(items[start : start + size + (ranks.rank < extra)])


def gathered(outcomes: Mapping[int, V], ranks: Ranks) -> dict[int, V]:
    """Every rank's ``index -> outcome`` merged, in index order (the order of the items sharded)."""
    merged = {index: value for part in ranks.gather(dict(outcomes)) for index, value in part.items()}
    return dict(sorted(merged.items()))


def slowest(timings: Mapping[str, float], ranks: Ranks) -> dict[str, float]:
    """Per timing, the largest over the ranks (they run side by side: the slowest one sets the wall time)."""
    parts = ranks.gather(dict(timings))
    return {name: max(part.get(name, 0.0) for part in parts) for name in timings}
