"""Name -> object registries: tasks, rewards, estimators, losses, engines, families.

One mechanism for every pluggable piece: ``@REGISTRY.register("name")`` adds an
object; an unknown name lists the known ones. A name claimed again by an object of the same
origin (the same function or class of the same file, imported a second time under another
module name) keeps the first; a name claimed by a different object is an error naming both.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class RegistryError(KeyError):
    """A registry lookup or registration failed; the message says why."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain.
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """A named collection of objects of one kind (e.g. "advantage estimator")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator adding the decorated object under ``name``."""

        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: T) -> None:
        if name in self._items:
            first = self._items[name]
            if first is obj or (_origin(first) is not None and _origin(first) == _origin(obj)):
                return  # the same definition loaded twice: harmless
            raise RegistryError(
                f"{self.kind} {name!r} is registered twice: by {_describe(first)} and by {_describe(obj)}"
            )
        self._items[name] = obj

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._items, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            known = ", ".join(sorted(self._items)) or "(none)"
            raise RegistryError(f"unknown {self.kind} {name!r}.{hint} Known: {known}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)


def _origin(obj: object) -> tuple | None:
    """Where ``obj`` was defined: (source file, qualified name) of a function or class; for a
    dataclass instance (e.g. an adapter holding its converter) its class and fields' origins; for
    another instance (e.g. a benchmark split) its class and attributes; None for built-in objects
    (never the same origin as anything)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        parts = tuple(_origin(value) or repr(value) for value in (getattr(obj, f.name) for f in dataclasses.fields(obj)))
        return (type(obj).__qualname__, parts)
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        kind = _origin(type(obj)) if type(obj).__module__ != "builtins" else None
        return None if kind is None or not hasattr(obj, "__dict__") else (kind, repr(sorted(vars(obj).items())))
    try:
        return inspect.getsourcefile(obj) or "", obj.__qualname__
    except TypeError:  # built-in
        return None


def _describe(obj: object) -> str:
    if inspect.isfunction(obj) or inspect.isclass(obj):
        origin = _origin(obj)
        return f"{origin[1]} in {origin[0]}" if origin else repr(obj)
    return repr(obj)
