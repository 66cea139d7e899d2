"""Failures of a run that one line can explain: the command prints ``mmgrpo <command>: error: ...``
and exits 1, while the traceback goes to the run's log (``train.log``) and the failure to the
run folder's ``failure.json``, which the run report shows."""

from __future__ import annotations

from typing import Any

FAILURE_FILE = "failure.json"  # in the run folder: why the last attempt stopped (gone once a run finishes)


class RunFailure(Exception):
    """A run stopped for a reason its message says in full (not a bug in mmgrpo)."""

    def record(self) -> dict[str, Any]:
        """What the run folder keeps of the failure (JSON-safe); subclasses add their details."""
        return {"error": str(self), "kind": type(self).__name__}
