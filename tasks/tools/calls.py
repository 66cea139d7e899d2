"""Tool calls in a completion, and running them.

A call is written as Qwen's chat templates write one, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
(the format families without their own use as well). Whatever goes wrong with a call (text that is not such
JSON, a tool the task does not offer, arguments its schema refuses, an exception, a call past the tool's
timeout) becomes an error observation the policy reads, and a counted outcome: never a failed step.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from tasks.timed_calls import abandoned_calls, call_with_timeout
from tasks.tools.base import Observation, Tool, ToolContext
from tasks.tools.schema import argument_errors

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.DOTALL)
MAX_ABANDONED = 4
"""Calls of one tool past their timeout and still running at which its next calls fail at once."""

OUTCOMES = ("ok", "failed", "unparsable", "unknown_tool", "bad_arguments", "raised", "timeout")
"""How a call went; ``failed``: the tool ran and answered with an error (a bad expression, a region off the image)."""


@dataclass(frozen=True)
class ToolCall:
    """One call as written: the tool's name and arguments, or why it could not be read (``problem``)."""

    name: str = ""
    arguments: Mapping[str, Any] | None = None
    problem: str | None = None

    def as_record(self) -> dict[str, Any]:
        """The call as plain data (what rewards and checkpoints see)."""
        if self.problem is not None:
            return {"name": self.name, "problem": self.problem}
        return {"name": self.name, "arguments": dict(self.arguments or {})}


def find_calls(text: str) -> list[ToolCall]:
    """The tool calls ``text`` holds, in order."""
    return [_read_call(body) for body in _CALL.findall(text)]


def _read_call(body: str) -> ToolCall:
    try:
        call = json.loads(body)
    except ValueError as error:
        return ToolCall(problem=f"the tool call is not JSON ({error})")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ToolCall(problem='a tool call is {"name": "...", "arguments": {...}}')
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # some templates write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return ToolCall(call["name"], problem="its arguments are not JSON")
    if not isinstance(arguments, dict):
        return ToolCall(call["name"], problem="its arguments must be an object")
    return ToolCall(call["name"], arguments)


def run_call(call: ToolCall, tools: Mapping[str, Tool], context: ToolContext) -> tuple[Observation, str]:
    """The observation of ``call`` among the ``tools`` offered, and its outcome (one of :data:`OUTCOMES`)."""
    if call.problem is not None:
        return Observation.failure(call.problem), "unparsable"
    tool = tools.get(call.name)
    if tool is None:
        return Observation.failure(f"no tool {call.name!r}; the tools are {sorted(tools)}"), "unknown_tool"
    errors = argument_errors(dict(call.arguments or {}), tool.parameters)
    if errors:
        return Observation.failure("; ".join(errors)), "bad_arguments"
    if abandoned_calls(f"tool:{tool.name}") >= MAX_ABANDONED:
        return Observation.failure(f"{tool.name} is not answering"), "timeout"
    outcome = call_with_timeout(lambda: tool.function(call.arguments, context), tool.timeout_s, f"tool:{tool.name}")
    if outcome.timed_out:
        return Observation.failure(f"{tool.name} took longer than {tool.timeout_s:g} s"), "timeout"
    if outcome.error is not None:
        return Observation.failure(f"{type(outcome.error).__name__}: {outcome.error}"), "raised"
    if not isinstance(outcome.value, Observation):
        return Observation.failure(f"{tool.name} returned {type(outcome.value).__name__}, not an observation"), "raised"
    return outcome.value, "failed" if outcome.value.error else "ok"
