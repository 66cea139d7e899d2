"""``option()``: a dataclass field that carries its help text and numeric bounds.

The help text is what ``describe_config()`` prints; the bounds are checked by
``Config.validate()``, so simple range rules live next to the field they guard.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
from dataclasses import dataclass
from typing import Any, Callable

# bound name -> (comparison that must hold, how it reads in an error message)
_COMPARISONS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "gt": (operator.gt, ">"),
    "ge": (operator.ge, ">="),
    "lt": (operator.lt, "<"),
    "le": (operator.le, "<="),
}


@dataclass(frozen=True)
class Bounds:
    """Numeric limits of a field; ``None`` means unbounded on that side."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def violation(self, value: Any) -> str | None:
        """Why ``value`` breaks these bounds (``"must be > 0"``), or None if it does not."""
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        broken = [
            f"{symbol} {limit}"
            for name, (holds, symbol) in _COMPARISONS.items()
            if (limit := getattr(self, name)) is not None and not holds(value, limit)
        ]
        return f"must be {' and '.join(broken)}" if broken else None


def option(
    default: Any,
    help: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
) -> Any:
    """A dataclass field with ``help`` and optional bounds; mutable defaults are copied per instance."""
    metadata = {"help": help, "bounds": Bounds(gt=gt, ge=ge, lt=lt, le=le)}
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_help(f: dataclasses.Field) -> str:
    """The help text given to ``option()`` (empty for a plain field)."""
    return f.metadata.get("help", "")


def field_bounds(f: dataclasses.Field) -> Bounds:
    """The bounds given to ``option()`` (unbounded for a plain field)."""
    return f.metadata.get("bounds", Bounds())
