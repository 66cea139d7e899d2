"""``describe_config()``: every config key with its type, default and help, for ``--help-config``."""

from __future__ import annotations

import dataclasses
import textwrap
import typing
from typing import Any, Iterator

from mmgrpo.config.coerce import field_types
from mmgrpo.config.fields import field_help
from mmgrpo.config.schema import Config


def describe_config(section: type = Config, width: int = 88) -> str:
    """Text listing each dotted key of ``section`` as ``key: type = default`` and its help below."""
    return "\n".join(_describe(section, section(), "", width, seen={}))


def _describe(cls: type, defaults: Any, prefix: str, width: int, seen: dict[type, str]) -> Iterator[str]:
    """Lines for ``cls``'s fields; ``seen`` maps list-item classes to where their keys were listed."""
    types_by_name = field_types(cls)
    for f in dataclasses.fields(cls):
        key, default = f"{prefix}{f.name}", getattr(defaults, f.name)
        if dataclasses.is_dataclass(default):
            yield f"\n[{key}] {field_help(f)}"
            yield from _describe(type(default), default, f"{key}.", width, seen)
            continue
        yield f"{key}: {f.type} = {_show(default)}"
        yield textwrap.fill(field_help(f), width, initial_indent="    ", subsequent_indent="    ")
        item_type = _list_item_dataclass(types_by_name[f.name])
        if item_type in seen:
            yield f"    Each item has the keys of {seen[item_type]}."
        elif item_type is not None:
            seen[item_type] = f"{key}[N]"
            yield from _describe(item_type, item_type(), f"{key}[N].", width, seen)


def _show(value: Any) -> str:
    """``repr`` of a default; dataclass items show only their non-default fields, to stay short."""
    if isinstance(value, list) and value and all(dataclasses.is_dataclass(item) for item in value):
        return f"[{', '.join(map(_changed_fields, value))}]"
    return repr(value)


def _changed_fields(item: Any) -> str:
    plain = type(item)()
    changed = (f"{f.name}={getattr(item, f.name)!r}" for f in dataclasses.fields(item)
               if getattr(item, f.name) != getattr(plain, f.name))
    return f"{type(item).__name__}({', '.join(changed)})"


def _list_item_dataclass(annotation: Any) -> type | None:
    """``X`` when ``annotation`` is ``list[X]`` with ``X`` a dataclass, else None."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list and args and dataclasses.is_dataclass(args[0]):
        return args[0]
    return None
