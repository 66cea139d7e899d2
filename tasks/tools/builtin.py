"""The built-in tools: ``zoom_in`` (a region of the image, seen again at full budget), ``calculator`` and
``python`` (code run in the code task's sandbox)."""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Sequence
from typing import Any, Callable

from processors.image import budget_size, decode_image, to_rgb
from processors.sources import describe
from tasks.grounding import to_original_pixels
from tasks.tools.base import Arguments, Observation, ToolContext, register_tool

MIN_REGION_PIXELS = 28
"""The smallest side a zoomed region keeps (one Qwen-VL patch after merging): a smaller box is widened to it."""


@register_tool(
    "zoom_in",
    "Zoom into a region of the image: returns that region as a new image, seen in more detail.",
    {"type": "object", "required": ["bbox_2d"], "additionalProperties": False, "properties": {
        "bbox_2d": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4,
                    "description": "the region [x1, y1, x2, y2], in the same coordinates as boxes in answers"},
        "image_index": {"type": "integer", "minimum": 0, "description": "which image of the prompt (default 0)"},
        "label": {"type": "string", "description": "what to look for there (optional)"},
    }},
)
def zoom_in(arguments: Arguments, context: ToolContext) -> Observation:
    images = context.sample.media("image")
    index = arguments.get("image_index", 0)
    if index >= len(images):
        return Observation.failure(f"the prompt has {len(images)} image(s); image_index {index} is past them")
    original = to_rgb(decode_image(images[index], describe(images[index])))
    resized = budget_size(original.size, context.model.image_budget)
    box = zoomed_region(arguments["bbox_2d"], context.coords, original.size, resized)
    if box is None:
        return Observation.failure(f"the region {list(arguments['bbox_2d'])} lies outside the image")
    region = original.crop(box)
    return Observation(text=f"The region {list(arguments['bbox_2d'])}, zoomed in:", images=(region,))


def zoomed_region(bbox: Sequence[float], coords: str, original_size: tuple[int, int],
                  resized_size: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """The pixels of the original image ``zoom_in`` crops for ``bbox`` written in ``coords`` (corners in any order,
    clamped to the image, widened to :data:`MIN_REGION_PIXELS` a side; None when it lies wholly outside)."""
    x1, y1, x2, y2 = to_original_pixels(tuple(bbox), coords, original_size, resized_size)
    return _clamped_region(min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2), original_size)


def _clamped_region(x1: float, y1: float, x2: float, y2: float, size: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """The box inside the image, widened about its centre to :data:`MIN_REGION_PIXELS` a side (None when it lies
    wholly outside)."""
    width, height = size
    if x2 <= 0 or y2 <= 0 or x1 >= width or y1 >= height:
        return None
    sides = []
    for low, high, limit in ((x1, x2, width), (y1, y2, height)):
        low, high = max(0.0, low), min(float(limit), high)
        grow = max(0.0, min(MIN_REGION_PIXELS, limit) - (high - low)) / 2
        low, high = low - grow, high + grow
        shift = max(0.0, -low) - max(0.0, high - limit)
        sides.append((round(low + shift), round(high + shift)))
    (left, right), (top, bottom) = sides
    return left, top, right, bottom


_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
MAX_EXPONENT, MAX_BITS = 1000, 4096
"""Bounds that keep one calculator call cheap: ``9 ** 9 ** 9`` is refused, not computed."""


@register_tool(
    "calculator",
    "Evaluate an arithmetic expression (+ - * / // % ** and parentheses) and return its value.",
    {"type": "object", "required": ["expression"], "additionalProperties": False,
     "properties": {"expression": {"type": "string", "description": "e.g. (3 + 4) * 12 / 5"}}},
)
def calculator(arguments: Arguments, context: ToolContext) -> Observation:
    try:
        value = _evaluate(ast.parse(arguments["expression"], mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError) as error:
        return Observation.failure(f"{type(error).__name__}: {error}")
    return Observation(text=repr(value))


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_EXPONENT or _bits(left) * abs(right) > MAX_BITS):
            raise ValueError(f"{left} ** {right} is too large to compute")
        value = _OPERATORS[type(node.op)](left, right)
        if _bits(value) > MAX_BITS:
            raise ValueError(f"a value of more than {MAX_BITS} bits")
        return value
    raise ValueError(f"only numbers and + - * / // % ** are allowed, not {ast.unparse(node)!r}")


def _bits(value: int | float | complex) -> int:
    return value.bit_length() if isinstance(value, int) else 0 if isinstance(value, float) else MAX_BITS + 1


@register_tool(
    "python",
    "Run a Python program (standard library only) and return what it prints, or its error.",
    {"type": "object", "required": ["code"], "additionalProperties": False,
     "properties": {"code": {"type": "string", "description": "the program; print what you want to see"}}},
    timeout_s=30.0,
)
def python(arguments: Arguments, context: ToolContext) -> Observation:
    from tasks.sandbox import run_tests

    sandbox, limits = _sandbox()
    result = run_tests(_AS_SCRIPT.format(code=arguments["code"]), [], sandbox, limits)
    if result.status not in ("passed", "failed"):
        return Observation(text=f"{result.stdout}\nError ({result.status}): {result.error or result.stderr[-2000:]}",
                           error=True)
    return Observation(text=result.stdout[-4000:] or "(it printed nothing)")


_AS_SCRIPT = """import sys as _sys
try:
    exec(compile({code!r}, "<python>", "exec"), {{"__name__": "__main__", "exit": _sys.exit, "quit": _sys.exit}})
except SystemExit as _stop:
    if _stop.code not in (None, 0):
        print(f"exit status {{_stop.code}}", file=_sys.stderr)
        raise
"""
"""The program run as a script, as ``python program.py`` would (the sandbox loads code as a module, ``solution``,
whose ``if __name__ == "__main__":`` block a grader must skip): its main block runs, ``exit()`` and ``sys.exit(0)``
end it quietly."""


@functools.lru_cache(maxsize=1)
def _sandbox() -> tuple[Any, Any]:
    """The code task's default sandbox (bubblewrap), made once per process."""
    from tasks.sandbox import make_sandbox

    return make_sandbox()
