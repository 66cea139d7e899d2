"""The check that decoded media hold no NaN or infinity: one vectorised ``isfinite`` over the values
just decoded (a few percent of the decoding time, ``bench/finite_checks.py``)."""

from __future__ import annotations

import numpy as np

from processors.errors import NonFiniteMediaError


def require_finite(values: np.ndarray, source: str, what: str) -> None:
    """Raise :class:`NonFiniteMediaError` naming ``source`` when any of ``values`` (floats) is NaN
    or infinite; ``what`` names them in the message ("audio samples", "pixel values")."""
    finite = np.isfinite(values)
    if not finite.all():
        bad = int(finite.size - np.count_nonzero(finite))
        raise NonFiniteMediaError(source, f"{bad} of {finite.size} {what} are NaN or infinite")
