"""Seeded, resumable order in which training prompts are visited."""

from __future__ import annotations

from typing import Any

import torch


class PromptSampler:
    """Visits ``num_items`` indices in a fresh seeded permutation each epoch.

    The state is two integers (epoch, position), so a resumed run draws exactly the
    prompts the uninterrupted run would have drawn.
    """

    def __init__(self, num_items: int, seed: int) -> None:
        if num_items <= 0:
            raise ValueError("the training set is empty (after skipping bad rows)")
        self.num_items = num_items
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_items, generator=generator).tolist()

    def take(self, count: int) -> list[int]:
        """The next ``count`` indices, crossing epoch boundaries as needed."""
        taken: list[int] = []
        while len(taken) < count:
            if self.position == self.num_items:
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            stop = min(self.num_items, self.position + count - len(taken))
            taken.extend(self._order[self.position : stop])
            self.position = stop
        return taken

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)
