"""Per-prompt success statistics that drive the dynamic group size."""

from __future__ import annotations

from typing import Any, Sequence

from mmgrpo.algos.group_size import allocate_group_sizes
from mmgrpo.types import Sample


class GroupSizeTracker:
    """Counts each prompt's successes to choose its next group size.

    A prompt's success rate is estimated with a uniform Beta(1, 1) prior, so an unseen
    prompt counts as a coin flip; :func:`~mmgrpo.algos.group_size.allocate_group_sizes`
    turns the rates into sizes within ``[g_min, g_max]`` that sum to the step's budget.
    """

    def __init__(self, *, g_min: int, g_max: int, budget_per_prompt: int) -> None:
        self.g_min, self.g_max, self.budget_per_prompt = g_min, g_max, budget_per_prompt
        self.counts: dict[str, list[int]] = {}  # sample id -> [successes, trials]

    def success_rate(self, sample_id: str) -> float:
        successes, trials = self.counts.get(sample_id, (0, 0))
        return (successes + 1) / (trials + 2)

    def sizes(self, samples: Sequence[Sample]) -> list[int]:
        rates = [self.success_rate(sample.id) for sample in samples]
        return allocate_group_sizes(
            rates, self.budget_per_prompt * len(samples), g_min=self.g_min, g_max=self.g_max
        )

    def record(self, sample_id: str, successes: Sequence[bool]) -> None:
        counts = self.counts.setdefault(sample_id, [0, 0])
        counts[0] += sum(successes)
        counts[1] += len(successes)

    def state_dict(self) -> dict[str, Any]:
        return {"counts": {key: list(value) for key, value in self.counts.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts = {key: list(value) for key, value in state["counts"].items()}
