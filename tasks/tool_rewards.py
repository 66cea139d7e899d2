"""Rewards on how a multi-turn trajectory used its tools, for any task (they read ``tool_outcomes``, one list per
completion: each call's outcome in order, :data:`tasks.tools.OUTCOMES`; empty for a single-turn completion).

- ``tool_calls_ok``: 1 if the completion called a tool and every call went through (``ok``), else 0 -- rewards
  well-formed calls with arguments the tool accepts.
- ``tool_calls``: how many calls the completion made. Give it a negative weight to charge a cost per call
  (``task.rewards={..., tool_calls: -0.05}``: 0.05 per call).
- ``tool_call_steps``: a process reward scoring each policy turn that ended in a call (its span of ``turn_spans``):
  1 if the call went through, else 0, so the turn with a bad call is the one its tokens' advantage blames. The last
  turn (the answer) is left to outcome rewards; a single-turn completion has no steps.
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


@register_reward("tool_call_steps")
def tool_call_steps(completions: Sequence[str], tool_outcomes: Sequence[Sequence[str]] | None = None,
                    turn_spans: Sequence[Sequence[tuple[int, int]]] | None = None, **_) -> list[list[tuple[int, int, float]]]:
    spans = list(turn_spans) if turn_spans is not None else [[(0, len(text))] for text in completions]
    return [[(start, end, float(outcome == "ok")) for (start, end), outcome in zip(turns, outcomes)]
            for turns, outcomes in zip(spans, _outcomes(completions, tool_outcomes))]
