"""Dynamic group size: spend the sampling budget where groups are likely to be informative.

A GRPO group teaches nothing when all its rewards are equal (advantage 0 everywhere).
For a prompt the policy solves with probability ``p``, a group of ``n`` samples is
informative with probability ``1 - p**n - (1 - p)**n``. Given per-prompt estimates of
``p``, :func:`allocate_group_sizes` distributes a total budget of samples greedily by
marginal gain in that probability, each prompt between ``g_min`` and ``g_max``: easy and
hopeless prompts get few samples, uncertain ones many.
"""

from __future__ import annotations

import heapq
from typing import Sequence


def informative_probability(success_rate: float, group_size: int) -> float:
    """P(a group of ``group_size`` Bernoulli(success_rate) rewards is not all equal)."""
    p = min(max(success_rate, 0.0), 1.0)
    return 1.0 - p**group_size - (1.0 - p) ** group_size


def allocate_group_sizes(
    success_rates: Sequence[float], budget: int, *, g_min: int, g_max: int
) -> list[int]:
    """Group size per prompt, summing to ``budget`` (clamped to ``[len*g_min, len*g_max]``).

    Greedy on the concave marginal gain of :func:`informative_probability`, which is
    optimal for this separable objective; ties go to the earlier prompt so the result is
    deterministic.
    """
    if not 1 <= g_min <= g_max:
        raise ValueError(f"need 1 <= g_min <= g_max, got g_min={g_min}, g_max={g_max}")
    sizes = [g_min] * len(success_rates)
    remaining = min(budget, g_max * len(sizes)) - g_min * len(sizes)

    def gain(index: int) -> float:
        p, n = success_rates[index], sizes[index]
        return informative_probability(p, n + 1) - informative_probability(p, n)

    heap = [(-gain(i), i) for i in range(len(sizes)) if sizes[i] < g_max]
    heapq.heapify(heap)
    while remaining > 0 and heap:
        _, index = heapq.heappop(heap)
        sizes[index] += 1
        remaining -= 1
        if sizes[index] < g_max:
            heapq.heappush(heap, (-gain(index), index))
    return sizes
