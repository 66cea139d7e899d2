"""Tools a policy calls while it reasons (``zoom_in``, ``calculator``, ``python``, and any a task plugin registers
with :func:`register_tool`): the registry, reading calls out of a completion, and running them."""

from tasks.tools import builtin
from tasks.tools.base import TOOLS, Observation, Tool, ToolContext, register_tool
from tasks.tools.calls import OUTCOMES, ToolCall, find_calls, run_call

__all__ = ["OUTCOMES", "TOOLS", "Observation", "Tool", "ToolCall", "ToolContext", "builtin", "find_calls",
           "register_tool", "run_call"]
