"""``math``: a numeric or symbolic answer, checked for equivalence with ``math-verify``.

The answer container is the ``<answer>`` tag or, when the completion has no answer tag,
a ``\\boxed{...}`` (the rule of :mod:`tasks.guards`), so ``\\frac{1}{2}``, ``0.5`` and
``\\boxed{1/2}`` all match a ground truth of ``1/2``. Rows: ``id``, ``problem``,
``answer`` (LaTeX or plain, or an R1-style ``<answer>...</answer>`` solution), optional media.

Each comparison is bounded by ``timeout_seconds``, silent, and computed once per
(answer, ground truth) (:mod:`tasks.math_verifier`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterable, Mapping, Sequence

from tasks.base import RowError, Task
from tasks.guards import Guards, guarded_answer
from tasks.math_verifier import DEFAULT_TIMEOUT, is_equivalent, is_readable
from tasks.registry import register_reward, register_task


@register_reward("math_accuracy")
def math_accuracy(
    completions: Sequence[str],
    answer: Sequence[Any],
    problem: Sequence[str | None] | None = None,
    *,
    guards: Guards | Mapping[str, Any] | bool | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT,
    **_,
) -> list[float]:
    guards = Guards.coerce(guards)
    problems = problem if problem is not None else [None] * len(completions)
    scores = []
    for text, truth, question in zip(completions, answer, problems):
        predicted = guarded_answer(text, question, guards).text
        correct = predicted is not None and is_equivalent(predicted, str(truth), timeout_seconds=timeout_seconds)
        scores.append(float(correct))
    return scores


class TimedTask(Task):
    """A task whose rewards call math-verify: it takes a ``timeout_seconds`` option for them."""

    timed_rewards: ClassVar[tuple[str, ...]] = ()  # rewards taking a ``timeout_seconds`` option

    def __init__(self, *, timeout_seconds: float = DEFAULT_TIMEOUT, **options) -> None:
        super().__init__(**options)
        if timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be positive, got {timeout_seconds}")
        self.timeout_seconds = timeout_seconds

    def reward_options(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        options = super().reward_options(names)
        for name in self.timed_rewards:
            if name in options:
                options[name]["timeout_seconds"] = self.timeout_seconds
        return options


@register_task("math")
class MathTask(TimedTask):
    default_rewards = {"format": 0.1, "math_accuracy": 1.0}
    metric_reward = "math_accuracy"
    guarded_rewards = ("math_accuracy",)
    timed_rewards = ("math_accuracy",)

    def ground_truth(self, row: Mapping[str, Any]) -> str:
        truth = str(super().ground_truth(row))
        if not is_readable(truth, timeout_seconds=self.timeout_seconds):
            raise RowError(row, "answer", f"math-verify cannot read the ground truth {truth!r}")
        return truth
