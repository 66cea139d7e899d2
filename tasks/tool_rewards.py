"""Rewards on how a multi-turn trajectory used its tools, for any task (they read ``tool_outcomes``, one list per
completion: each call's outcome in order, :data:`tasks.tools.OUTCOMES`; empty for a single-turn completion).

- ``tool_calls_ok``: 1 if the completion called a tool and every call went through (``ok``), else 0 -- rewards
  well-formed calls with arguments the tool accepts.
- ``tool_calls``: how many calls the completion made. Give it a negative weight to charge a cost per call
  (``task.rewards={..., tool_calls: -0.05}``: 0.05 per call).
"""

from __future__ import annotations

from collections.abc import Sequence

from tasks.registry import register_reward


def _outcomes(completions: Sequence[str], tool_outcomes: Sequence[Sequence[str]] | None) -> list[Sequence[str]]:
    return list(tool_outcomes) if tool_outcomes is not None else [[] for _ in completions]


@register_reward("tool_calls_ok")
def tool_calls_ok(completions: Sequence[str], tool_outcomes: Sequence[Sequence[str]] | None = None, **_) -> list[float]:
    return [float(bool(outcomes) and all(o == "ok" for o in outcomes))
            for outcomes in _outcomes(completions, tool_outcomes)]


@register_reward("tool_calls")
def tool_calls(completions: Sequence[str], tool_outcomes: Sequence[Sequence[str]] | None = None, **_) -> list[float]:
    return [float(len(outcomes)) for outcomes in _outcomes(completions, tool_outcomes)]
