"""What a dataset adapter is: public-format columns -> a canonical row (see docs/DEVELOPING.md).

An adapter declares the columns that identify its format (required, and the optional ones its
published schema also has) and a pure ``convert(raw) -> row``
that returns ``problem``, ``answer`` and raw media references in the canonical media columns
(``image``/``images``/``video``/``videos``/``audio``/``audios``); ``load_rows`` then resolves,
checks and counts. A row that cannot be converted raises ``BadRow``, which the loader turns
into a counted skip, never a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from mmgrpo.registry import Registry

Row = dict[str, Any]
Converter = Callable[[Mapping[str, Any]], Row]

_INTEGER = re.compile(r"[-+]?\d+")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_MEDIA_TOKEN = re.compile(r"<(image|video|audio)>")


class BadRow(ValueError):
    """A row that must be skipped: ``reason`` is a short category, ``detail`` the specifics."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class Adapter:
    """A named public format: the columns that identify it, the others it may have, and its row converter."""

    name: str
    columns: frozenset[str]
    convert: Converter
    optional: frozenset[str] = frozenset()

    def matches(self, columns: Iterable[str]) -> bool:
        """Whether a table with ``columns`` is exactly this format: every required column and no column
        the format does not have (a table with more columns is another format, not this one)."""
        present = set(columns)
        return self.columns <= present <= self.columns | self.optional | {"id"}

    def describe(self) -> str:
        optional = f" [+ {', '.join(sorted(self.optional))}]" if self.optional else ""
        return f"{self.name}: {', '.join(sorted(self.columns))}{optional}"


ADAPTERS: Registry[Adapter] = Registry("dataset adapter")


def register_adapter(
    name: str, columns: Iterable[str], optional: Iterable[str] = ()
) -> Callable[[Converter], Converter]:
    """Decorator registering ``convert`` as adapter ``name``, identified by ``columns`` (plus ``optional``
    ones its schema may have; ``id`` is always allowed)."""

    def decorator(convert: Converter) -> Converter:
        ADAPTERS.add(name, Adapter(name, frozenset(columns), convert, frozenset(optional)))
        return convert

    return decorator


def detect_adapter(columns: Iterable[str]) -> Adapter:
    """The adapter whose format the columns are exactly (:meth:`Adapter.matches`), the most specific one if several.

    Ambiguity (two equally specific matches) or no match is a one-line error naming the columns
    found and the adapters that exist, so the user passes ``adapter=`` (or maps the columns with
    ``adapter_args``) instead of getting a silent guess.
    """
    columns = sorted(columns)
    matching = [ADAPTERS.get(name) for name in ADAPTERS if ADAPTERS.get(name).matches(columns)]
    if not matching:
        known = "; ".join(ADAPTERS.get(name).describe() for name in ADAPTERS)
        raise ValueError(
            f"no dataset adapter matches columns {columns}. Adapters and their columns: {known}. "
            "Name one with adapter=, or map a custom table's columns with adapter_args: {columns: {problem: COL, "
            "answer: COL, image: COL}}"
        )
    most = max(len(a.columns) for a in matching)
    best = [a for a in matching if len(a.columns) == most]
    if len(best) > 1:
        raise ValueError(
            f"columns {columns} match several adapters ({', '.join(a.name for a in best)}); choose one with adapter=..."
        )
    return best[0]


def field(raw: Mapping[str, Any], name: str) -> Any:
    """``raw[name]``; missing, None or blank text is a ``BadRow("missing field")``."""
    value = raw.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BadRow("missing field", repr(name))
    return value


def first_field(raw: Mapping[str, Any], names: Iterable[str]) -> Any:
    """The first present field among ``names`` (e.g. the answer column of a TRL dataset)."""
    names = list(names)
    for name in names:
        if raw.get(name) is not None:
            return field(raw, name)
    raise BadRow("missing field", " or ".join(map(repr, names)))


def answer_value(value: Any) -> Any:
    """Ground truth with tags stripped: ``"<answer> 3 </answer>"`` -> 3, ``" B "`` -> "B"."""
    if not isinstance(value, str):
        return value
    tagged = _ANSWER_TAG.search(value)
    text = (tagged.group(1) if tagged else value).strip()
    return int(text) if _INTEGER.fullmatch(text) else text


def strip_media_tokens(text: str) -> str:
    """Question text without ``<image>``/``<video>``/``<audio>`` placeholders (tasks add media parts)."""
    return _MEDIA_TOKEN.sub("", text).strip()


def one_or_many(value: Any, column: str) -> Row:
    """A media value under the singular column, or a list under the plural one (``image``/``images``)."""
    if isinstance(value, (list, tuple)):
        return {f"{column}s": list(value)}
    return {column: value}
