"""Turn plain data (from YAML or the command line) into typed config dataclasses.

Each value is checked against its field's annotation and converted where the intent
is unambiguous: ``"1e-4"`` (PyYAML reads it as a string) becomes a float for a float
field, ``3`` becomes ``3.0``, ``"yes"`` becomes ``True``, ``"none"`` becomes ``None``
for an optional field. Anything else raises ``ConfigError`` naming the dotted key.
Supported annotations: bool, int, float, str, Any, Literal, ``X | None``,
``list[X]``, ``dict[str, X]`` and nested dataclasses.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Callable, Iterable, Literal, Mapping, Union

from mmgrpo.config.errors import ConfigError, closest, did_you_mean

_NULL_WORDS = {"none", "null", "~"}
_TRUE_WORDS = {"true", "yes", "on", "1"}
_FALSE_WORDS = {"false", "no", "off", "0"}


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    raise ValueError("true or false")


def _to_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass  # maybe "1e3": fall through to the float route
        try:
            value = float(value)
        except ValueError:
            raise ValueError("an integer") from None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError("an integer")


def _to_float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise ValueError("a number")


def _to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # e.g. run_name=2024 reaches us as an int
    raise ValueError("a string")


_SCALARS: dict[type, Callable[[Any], Any]] = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}


def build(cls: type, mapping: Any, key: str = "") -> Any:
    """An instance of dataclass ``cls`` from ``mapping``; missing keys keep their defaults."""
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{key or 'config'}: expected a mapping of {cls.__name__} options, got {mapping!r}")
    hints = field_types(cls)
    kwargs = {}
    for name, value in mapping.items():
        dotted = _join(key, str(name))
        if name not in hints:
            raise unknown_key_error(dotted, hints)
        kwargs[name] = coerce(value, hints[name], dotted)
    return cls(**kwargs)


def unknown_key_error(dotted: str, valid: Iterable[str]) -> ConfigError:
    """The error for a key that is not a field: suggests close names, else lists all valid ones."""
    parent, _, name = dotted.rpartition(".")
    valid = list(valid)
    matches = [_join(parent, match) for match in closest(name, valid)]
    if matches:
        hint = f" Did you mean {' or '.join(map(repr, matches))}?"
    else:
        hint = f" Valid keys{f' under {parent!r}' if parent else ''}: {', '.join(valid)}."
    return ConfigError(f"unknown config key {dotted!r}.{hint}")


def coerce(value: Any, annotation: Any, key: str) -> Any:
    """``value`` converted to ``annotation``; ``ConfigError`` naming ``key`` when it cannot be."""
    if annotation is Any:
        return value
    if dataclasses.is_dataclass(annotation):
        return build(annotation, value, key)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return _coerce_literal(value, args, key)
    if origin in (Union, types.UnionType):
        return _coerce_optional(value, args, key)
    if origin is list:
        return _coerce_list(value, args[0], key)
    if origin is dict:
        return _coerce_dict(value, args, key)
    if annotation in _SCALARS:
        try:
            return _SCALARS[annotation](value)
        except ValueError as expected:
            raise ConfigError(f"{key}: expected {expected}, got {value!r}") from None
    raise TypeError(f"{key}: the config layer does not support the annotation {annotation!r}")


def _coerce_literal(value: Any, allowed: tuple[Any, ...], key: str) -> Any:
    for option in allowed:
        try:
            if _SCALARS[type(option)](value) == option:
                return option
        except ValueError:
            continue
    choices = ", ".join(map(repr, allowed))
    hint = did_you_mean(str(value), [str(option) for option in allowed])
    raise ConfigError(f"{key}: {value!r} is not one of {choices}.{hint}")


def _coerce_optional(value: Any, members: tuple[Any, ...], key: str) -> Any:
    present = [member for member in members if member is not type(None)]
    if len(present) != 1 or len(members) != 2:
        raise TypeError(f"{key}: only 'X | None' unions are supported, got {members!r}")
    if value is None or (isinstance(value, str) and value.strip().lower() in _NULL_WORDS):
        return None
    return coerce(value, present[0], key)


def _coerce_list(value: Any, item_type: Any, key: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{key}: expected a list such as [a, b], got {value!r}")
    return [coerce(item, item_type, f"{key}[{index}]") for index, item in enumerate(value)]


def _coerce_dict(value: Any, key_and_value_types: tuple[Any, Any], key: str) -> dict[Any, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a mapping such as {{name: 1.0}}, got {value!r}")
    key_type, value_type = key_and_value_types
    return {
        coerce(name, key_type, key): coerce(item, value_type, _join(key, str(name))) for name, item in value.items()
    }


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Field name -> resolved annotation (the schema uses postponed, string annotations)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name
