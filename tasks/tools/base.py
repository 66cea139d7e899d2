"""Tools a policy may call while it reasons: a name, a JSON schema of the arguments, a function.

A tool is registered like a reward (``@register_tool(name, description, parameters)`` in a module
here or in a task plugin) and gets ``(arguments, context)``: the validated arguments and
:class:`ToolContext` (the sample being answered, the model's box convention and image budget). It
returns an :class:`Observation`, text and/or images, that the rollout appends as a ``tool`` turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from PIL import Image

from mmgrpo.registry import Registry
from mmgrpo.types import Sample
from tasks.base import ModelInfo

Arguments = Mapping[str, Any]


@dataclass(frozen=True)
class ToolContext:
    """What a tool may read besides its arguments: the sample, and how the model sees its images."""

    sample: Sample
    model: ModelInfo = field(default_factory=ModelInfo)
    coords: str = "norm1"
    """The coordinate system boxes are written in (:data:`tasks.grounding.COORDINATE_SYSTEMS`)."""


@dataclass(frozen=True)
class Observation:
    """A tool's result as the policy sees it; ``error`` marks a failed call (bad arguments, an unknown tool, a
    timeout, an exception), counted apart, the policy seeing its text all the same."""

    text: str = ""
    images: tuple[Image.Image, ...] = ()
    error: bool = False

    @classmethod
    def failure(cls, text: str) -> Observation:
        return cls(text=f"Error: {text}", error=True)


ToolFn = Callable[[Arguments, ToolContext], Observation]


@dataclass(frozen=True)
class Tool:
    """A registered tool: what the chat template shows the model (name, description, parameters) and its code."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """A JSON schema of an object (``{"type": "object", "properties": ..., "required": [...]}``)."""
    function: ToolFn
    timeout_s: float = 10.0

    def spec(self) -> dict[str, Any]:
        """The tool as chat templates take it (``apply_chat_template(..., tools=[...])``)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": dict(self.parameters)}}


TOOLS: Registry[Tool] = Registry("tool")


def register_tool(
    name: str, description: str, parameters: Mapping[str, Any], *, timeout_s: float = 10.0
) -> Callable[[ToolFn], ToolFn]:
    """Function decorator: register ``(arguments, context) -> Observation`` as the tool ``name``."""

    def decorator(function: ToolFn) -> ToolFn:
        TOOLS.add(name, Tool(name, description, parameters, function, timeout_s))
        return function

    return decorator
