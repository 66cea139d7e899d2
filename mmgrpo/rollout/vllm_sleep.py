"""vLLM's sleep mode around training (GPU only): what of a colocated engine's memory goes back to the trainer,
and when (``rollout.vllm.enable_sleep_mode``, ``rollout.vllm.sleep_level``).

Level 1: after each sampling the KV cache is freed and the weights move to CPU memory; they are woken before
the next sampling (the weights alone before a push). Level 2: the engine stays awake through a step's sampling
(and any evaluation or resampling round before the update); when the policy update starts, its weights and KV
cache are discarded, and the push after the update sends every weight (those no update changes included)
before anything samples again. Sampling with discarded weights is refused, never silently wrong. The state
belongs to the shared ``vllm.LLM``: evaluation and training engines share one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PARTS = ("weights", "kv_cache")


@dataclass
class _EngineSleep:
    asleep: set[str] = field(default_factory=set)  # of PARTS
    weights_discarded: bool = False


_STATES: dict[int, _EngineSleep] = {}  # id(shared vllm.LLM) -> its sleep state


class SleepMode:
    """When the engine ``llm`` sleeps (``enabled``: built with sleep mode) at ``level`` 1 or 2 (see the module)."""

    def __init__(self, llm: Any, *, enabled: bool, level: int) -> None:
        self.llm, self.enabled, self.level = llm, enabled, level
        self.state = _STATES.setdefault(id(llm), _EngineSleep())

    @property
    def weights_discarded(self) -> bool:
        """The engine holds no weights: the next push must send them all."""
        return self.state.weights_discarded

    def wake(self, *parts: str) -> None:
        """Wake those of ``parts`` that are asleep."""
        asleep = [part for part in parts if part in self.state.asleep]
        if asleep:
            self.llm.wake_up(tags=asleep)
            self.state.asleep.difference_update(asleep)

    def before_sampling(self) -> None:
        if self.state.weights_discarded:
            raise RuntimeError(
                "the vLLM engine's weights were discarded for the policy update (rollout.vllm.sleep_level=2) and no "
                "push has restored them: push the policy's weights (update_weights) before sampling"
            )
        self.wake(*PARTS)

    def after_sampling(self) -> None:
        if self.enabled and self.level == 1:
            self.llm.sleep(level=1)
            self.state.asleep.update(PARTS)

    def before_update(self) -> None:
        if self.enabled and self.level == 2:
            self.llm.sleep(level=2)
            self.state.asleep.update(PARTS)
            self.state.weights_discarded = True

    def weights_loaded(self) -> None:
        """A push sent every weight: the engine may sample again."""
        self.state.weights_discarded = False
