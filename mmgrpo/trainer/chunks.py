"""How a rank's batch splits into chunks of whole groups (mini-batches, micro-batches), in step with the other ranks.

By count: consecutive groups, about ``limit`` completions each. By tokens (``train.max_tokens_per_micro_batch``,
verl's ``use_dynamic_bsz``): groups of similar total cost spread over as few micro-batches as the budget allows,
longest first into the least-filled one, so micro-batches of long and of short completions even out instead of one
holding every long one. Every rank runs as many chunks as the rank with the most: each forward and backward is a
collective under a sharded back end. A rank with fewer repeats its first chunk, which counts for nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mmgrpo.models.shared_prefix import group_chunks
from mmgrpo.trainer.backends import TrainingBackend

Part = slice | list[int]  # completions of a chunk: consecutive, or picked by index


@dataclass(frozen=True)
class Chunk:
    """Whole groups of a batch processed together: prompt ``rows``, completions ``part``."""

    rows: list[int]
    part: Part
    counts: bool = True  # False: a repeat that only keeps this rank in step with the others


def balanced_chunks(backend: TrainingBackend, group_sizes: Sequence[int], limit: int) -> list[Chunk]:
    """This rank's chunks of about ``limit`` completions, then repeats of its first until it has as many as the
    rank with the most."""
    chunks = [Chunk(rows, part) for rows, part in group_chunks(group_sizes, limit)]
    return _in_step(backend, chunks)


def token_budget_chunks(
    backend: TrainingBackend, group_sizes: Sequence[int], group_tokens: Sequence[int], budget: int
) -> list[Chunk]:
    """Chunks of whole groups of at most ``budget`` tokens (a group over it alone), group p costing
    ``group_tokens[p]``; every rank splits into the same number, the fewest all of them fit in."""
    count = 1
    while True:  # ranks agree on a count every rank's groups fit in (rarely a second round)
        bins = budget_bins(group_tokens, count, budget)
        agreed = int(backend.ranks.all_reduce({"chunks": len(bins)}, "max")["chunks"])
        if agreed == count:
            break
        count = agreed
    starts = list(itertools.accumulate(group_sizes, initial=0))
    chunks = [
        Chunk(rows, [i for p in rows for i in range(starts[p], starts[p] + group_sizes[p])]) for rows in bins if rows
    ]
    return _padded(chunks, count)  # every rank agreed on ``count``: no second collective


def budget_bins(costs: Sequence[int], count: int, budget: int) -> list[list[int]]:
    """Indices of ``costs`` in at least ``count`` bins: largest first, each into the least-filled bin it fits in
    under ``budget`` (a new bin when none has room); bins may stay empty. Each bin's indices ascending."""
    bins: list[list[int]] = [[] for _ in range(count)]
    filled = [0] * count
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        fitting = [b for b in range(len(bins)) if not bins[b] or filled[b] + costs[index] <= budget]
        if not fitting:
            bins.append([])
            filled.append(0)
            fitting = [len(bins) - 1]
        target = min(fitting, key=lambda b: (filled[b], b))
        bins[target].append(index)
        filled[target] += costs[index]
    return [sorted(members) for members in bins]


def _in_step(backend: TrainingBackend, chunks: list[Chunk]) -> list[Chunk]:
    """``chunks`` followed by repeats of the first (at weight 0) up to the most any rank runs."""
    return _padded(chunks, int(backend.ranks.all_reduce({"chunks": len(chunks)}, "max")["chunks"]))


def _padded(chunks: list[Chunk], count: int) -> list[Chunk]:
    """``chunks`` followed by repeats of the first (at weight 0) up to ``count``."""
    return chunks + [replace(chunks[0], counts=False)] * (count - len(chunks))
