"""Stop requests (Ctrl-C, a scheduler's SIGTERM) as an exception the training loops can handle.

While :func:`stop_on_signals` is active, SIGINT and SIGTERM raise :class:`Interrupted`
(a ``KeyboardInterrupt``, so one ``except KeyboardInterrupt`` serves both), which lets a
loop save the checkpoint of its last finished step before the process exits with the
shell's convention for a signal: 128 + its number (130 for SIGINT, 143 for SIGTERM).
Code that must not be cut in half (an optimizer update and the record of its step) runs
under :func:`signals_deferred`: a signal arriving there is raised when the block ends;
:func:`signals_allowed` opens a part of such a block that may be abandoned (collecting rollouts).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The process received ``signum``; the run should save what it finished and stop."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def exit_code(stop: KeyboardInterrupt) -> int:
    """128 + the signal number (a plain KeyboardInterrupt counts as SIGINT)."""
    return 128 + int(getattr(stop, "signum", signal.SIGINT))


def signal_name(stop: KeyboardInterrupt) -> str:
    return signal.Signals(getattr(stop, "signum", signal.SIGINT)).name


class _Deferral(threading.local):
    depth = 0
    pending: int | None = None


_deferral = _Deferral()


def _raise_interrupted(signum: int, _frame: object) -> None:
    if _deferral.depth:
        _deferral.pending = signum
        return
    raise Interrupted(signum)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT / SIGTERM raise :class:`Interrupted` inside the block (main thread only; nests)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set, and signals only arrive, in the main thread
        return
    previous = {signum: signal.signal(signum, _raise_interrupted) for signum in HANDLED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold back a stop request until the block has finished, then raise it."""
    _deferral.depth += 1
    signum = None
    try:
        yield
    finally:
        _deferral.depth -= 1
        if _deferral.depth == 0:  # an exception leaving the block drops the request: the run stops anyway
            signum, _deferral.pending = _deferral.pending, None
    if signum is not None:
        raise Interrupted(signum)


@contextmanager
def signals_allowed() -> Iterator[None]:
    """Inside a deferring block: let stop requests raise again (one held back so far too)."""
    depth, _deferral.depth = _deferral.depth, 0
    try:
        if _deferral.pending is not None:
            signum, _deferral.pending = _deferral.pending, None
            raise Interrupted(signum)
        yield
    finally:
        _deferral.depth = depth
