"""Seeded, resumable order in which training prompts are visited."""

from __future__ import annotations

from typing import Any, Sequence

import torch


class PromptSampler:
    """Draws prompt indices reproducibly; its whole state is two integers.

    Equal weights: a fresh seeded permutation each epoch (dataset order without
    ``shuffle``), every prompt once per epoch.
    Unequal weights (a dataset mixture): each index drawn with probability proportional
    to its weight, with replacement, from a generator seeded by the draw position. Either
    way a resumed run draws exactly the prompts the uninterrupted run would have drawn.
    """

    def __init__(
        self, num_items: int, seed: int, weights: Sequence[float] | None = None, *, shuffle: bool = True
    ) -> None:
        if num_items <= 0:
            raise ValueError("the training set is empty (after skipping bad rows)")
        if weights is not None and len(weights) != num_items:
            raise ValueError(f"{len(weights)} weights for {num_items} prompts")
        self.num_items = num_items
        self.seed = seed
        self.shuffle = shuffle
        uniform = weights is None or len(set(weights)) <= 1
        self.weights = None if uniform else torch.tensor(list(weights), dtype=torch.float64)
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _generator(self, salt: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + salt)

    def _permutation(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.num_items))
        return torch.randperm(self.num_items, generator=self._generator(epoch)).tolist()

    def take(self, count: int) -> list[int]:
        """The next ``count`` indices."""
        if self.weights is not None:
            drawn = torch.multinomial(self.weights, count, replacement=True, generator=self._generator(self.position))
            self.position += count
            return drawn.tolist()
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
