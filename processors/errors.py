"""Typed errors for media that cannot be turned into model inputs.

Every error names its source (a path, or a short description of an in-memory
object) so the data pipeline can skip and count the bad row and the user can find
the file. All are ``ValueError`` subclasses: bad data, not a bug in the caller.
"""

from __future__ import annotations


class MediaError(ValueError):
    """A media reference could not be loaded; ``source`` says which, ``reason`` why.

    ``category`` is the short skip reason a row with this error is counted under.
    """

    category = "bad media"

    def __init__(self, source: object, reason: str) -> None:
        self.source = str(source)
        self.reason = reason
        super().__init__(f"{self.source}: {reason}")


class MissingMediaError(MediaError):
    """The referenced file does not exist (or is not a regular file)."""

    category = "missing media"


class CorruptMediaError(MediaError):
    """The bytes exist but do not decode (unknown format, truncated, damaged)."""

    category = "corrupt media"


class EmptyMediaError(MediaError):
    """The media decodes to nothing: a zero-byte file, zero pixels, frames or samples."""

    category = "empty media"


class MediaShapeError(MediaError):
    """The media decodes but its shape or value range is unusable (e.g. absurd aspect ratio)."""

    category = "bad media shape"


class NonFiniteMediaError(MediaError):
    """The media decode to values that are not finite (NaN or infinity in float samples or pixels):
    the model would turn them into a NaN loss."""

    category = "non-finite media"
