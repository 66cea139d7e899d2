"""What trajectories did with their tools, as numbers: the same for a training step's completions and an
evaluation's records (``tools/...`` in ``metrics.jsonl`` and in an eval's summary)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mmgrpo.types import Completion
from tasks.tools import TOOLS


@dataclass(frozen=True)
class ToolUse:
    """One trajectory's tool use: each call's tool (``?`` for one that could not be read or names no registered tool:
    a metric's name never comes from what the policy wrote) and outcome, in order; its policy turns; the tools'
    tokens and images inside it."""

    calls: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    turns: int = 1
    observation_tokens: int = 0
    images: int = 0

    @classmethod
    def of(cls, completion: Completion) -> ToolUse:
        return cls(
            calls=tuple(call["name"] if call.get("name") in TOOLS else "?" for call in completion.tool_calls),
            outcomes=tuple(completion.tool_outcomes),
            turns=len(completion.turn_text_ends) + 1,
            observation_tokens=len(completion.token_ids) - completion.policy_token_count,
            images=completion.media.counts.get("image", 0) if completion.media else 0,
        )


def tool_metrics(uses: Sequence[ToolUse]) -> dict[str, float]:
    """Per trajectory: calls, calls of each tool (``tools/calls/<name>``), policy turns, the tools' tokens and images;
    and the share of calls with each outcome (``tools/<outcome>_frac``: ok, failed, unparsable, ...). Empty when no
    trajectory called a tool."""
    outcomes = [outcome for use in uses for outcome in use.outcomes]
    if not outcomes:
        return {}
    count = len(uses)
    calls = Counter(name for use in uses for name in use.calls)
    return {
        "tools/calls_per_completion": len(outcomes) / count,
        **{f"tools/calls/{name}": n / count for name, n in sorted(calls.items())},
        **{f"tools/{outcome}_frac": n / len(outcomes) for outcome, n in sorted(Counter(outcomes).items())},
        "tools/turns_per_completion": sum(use.turns for use in uses) / count,
        "tools/observation_tokens": sum(use.observation_tokens for use in uses) / count,
        "tools/images_per_completion": sum(use.images for use in uses) / count,
    }
