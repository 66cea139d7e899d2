"""What a dataset adapter is: public-format columns -> a canonical row (see docs/DEVELOPING.md).

An adapter declares the columns that identify its format and a pure ``convert(raw) -> row``
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
    """A named public format: the columns that identify it and its row converter."""

    name: str
    columns: frozenset[str]
    convert: Converter

    def matches(self, columns: Iterable[str]) -> bool:
        return self.columns <= set(columns)


ADAPTERS: Registry[Adapter] = Registry("dataset adapter")


def register_adapter(name: str, columns: Iterable[str]) -> Callable[[Converter], Converter]:
    """Decorator registering ``convert`` as adapter ``name``, identified by ``columns``."""

    def decorator(convert: Converter) -> Converter:
        ADAPTERS.add(name, Adapter(name, frozenset(columns), convert))
        return convert

    return decorator


def detect_adapter(columns: Iterable[str]) -> Adapter:
    """The adapter whose identifying columns are present, the most specific one if several.

    Ambiguity (two equally specific matches) or no match is an error listing the candidates,
    so the user passes ``adapter=`` instead of getting a silent guess.
    """
    columns = sorted(columns)
    matching = [ADAPTERS.get(name) for name in ADAPTERS if ADAPTERS.get(name).matches(columns)]
    if not matching:
        known = "; ".join(f"{name}: {sorted(ADAPTERS.get(name).columns)}" for name in ADAPTERS)
        raise ValueError(f"no dataset adapter matches columns {columns}. Adapters and the columns they need: {known}")
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
