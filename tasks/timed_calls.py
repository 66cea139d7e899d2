"""Run a call on a daemon thread for at most a timeout, abandoning it past that (a thread cannot be killed).

Shared by reward calls (:mod:`tasks.reward_calls`) and tool calls (:mod:`tasks.tools.calls`). Abandoned calls are
counted per name, so a caller can refuse to start more while too many still run.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class Outcome:
    """What a call returned or raised, or that it timed out."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False


_abandoned_lock = threading.Lock()
_abandoned: Counter[str] = Counter()  # name -> its calls past their timeout that still run


def abandoned_calls(name: str) -> int:
    """How many calls of ``name`` were abandoned at their timeout and are still running."""
    with _abandoned_lock:
        return _abandoned[name]


def call_with_timeout(thunk: Callable[[], Any], timeout: float | None, name: str) -> Outcome:
    """Run ``thunk`` on a daemon thread for at most ``timeout`` seconds (directly when None)."""
    if timeout is None:
        try:
            return Outcome(value=thunk())
        except Exception as error:  # noqa: BLE001 - any failure is reported, not fatal
            return Outcome(error=error)
    outcome, state = Outcome(), {"finished": False, "abandoned": False}

    def target() -> None:
        try:
            outcome.value = thunk()
        except BaseException as error:  # noqa: BLE001 - even SystemExit in a call is its failure
            outcome.error = error
        with _abandoned_lock:
            state["finished"] = True
            _abandoned[name] -= state["abandoned"]

    thread = threading.Thread(target=target, name=f"timed-call-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    with _abandoned_lock:
        if state["finished"]:
            return outcome
        state["abandoned"] = True
        _abandoned[name] += 1
    return Outcome(timed_out=True)
