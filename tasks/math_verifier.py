"""Bounded, quiet, cached math-verify: every check runs in a child process with a time limit.

math-verify (sympy underneath) can spend unbounded time on a pathological answer
(``9^{9^{9^{9}}}``, ``100000!!``), and its own timeout uses ``SIGALRM``, which works only
on the main thread -- not in a reward worker thread -- and prints "Timeout during
comparison". Here each check is sent to a child process (:mod:`tasks.math_worker`) from
a pool that grows to the number of concurrent checks; a check that overruns
``timeout_seconds`` answers False and its child is killed, which stops sympy wherever it
is (a later check starts a new one). The child's output is discarded. Results are cached per
(answer, ground truth), so the G completions of a group, and an eval that reads a
reward twice, compute each comparison once.
"""

from __future__ import annotations

import atexit
import json
import logging
import select
import subprocess
import sys
import threading
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 2.0  # seconds for one check; ordinary answers take milliseconds
STARTUP_TIMEOUT = 120.0  # seconds a new worker may take to import math-verify and sympy
WORKER_SCRIPT = Path(__file__).with_name("math_worker.py")
# Runs the worker as a script, never as part of this package: its imports stay light
# (math-verify only) and this folder's math.py cannot shadow the standard library.
_WORKER_COMMAND = [sys.executable, "-c", f"import runpy; runpy.run_path({str(WORKER_SCRIPT)!r}, run_name='__main__')"]
_WORKER_CWD = WORKER_SCRIPT.parent.parent  # "-c" puts the working folder first on sys.path: never this one


class _Worker:
    """One child process running :mod:`tasks.math_worker`, started and ready to answer."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            _WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=_WORKER_CWD,
        )
        if self._reply(STARTUP_TIMEOUT) is None:  # imports are not part of any check's time
            self.stop()
            raise RuntimeError(f"the math-verify worker did not start within {STARTUP_TIMEOUT:.0f} s")

    def ask(self, request: list[str], timeout_seconds: float) -> bool | None:
        """The child's answer to ``request``, or None if it did not answer in time (or died)."""
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except OSError:  # BrokenPipeError: the child died
            return None
        return self._reply(timeout_seconds)

    def _reply(self, timeout_seconds: float) -> bool | None:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_seconds)
        line = self.process.stdout.readline() if ready else ""
        return json.loads(line) if line else None

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()


_idle: list[_Worker] = []  # started workers no check is using
_started: list[_Worker] = []
_lock = threading.Lock()


def _borrow() -> _Worker:
    """An idle worker, or a new one: reward calls come on short-lived threads, so workers
    belong to the pool, not to a thread."""
    with _lock:
        while _idle:
            worker = _idle.pop()
            if worker.alive():
                return worker
    worker = _Worker()
    with _lock:
        _started.append(worker)
    return worker


def _give_back(worker: _Worker) -> None:
    with _lock:
        _idle.append(worker)


@atexit.register
def stop_workers() -> None:
    """Stop every worker process (also run at interpreter exit)."""
    with _lock:
        for worker in _started:
            worker.stop()
        _started.clear()
        _idle.clear()


def _check(request: list[str], timeout_seconds: float) -> bool:
    worker = _borrow()
    answer = worker.ask(request, timeout_seconds)
    if answer is None:
        worker.stop()  # overran (or died): kill it so the check stops now
        with _lock:
            _started.remove(worker)
        logger.debug("math-verify gave no answer within %.1f s for %r", timeout_seconds, request)
        return False
    _give_back(worker)
    return bool(answer)


@lru_cache(maxsize=65536)
def is_equivalent(answer_text: str, truth: str, *, timeout_seconds: float = DEFAULT_TIMEOUT) -> bool:
    """Whether a model's answer text equals the ground truth mathematically; False when
    either cannot be read or the check takes longer than ``timeout_seconds``."""
    return _check(["equal", answer_text, truth], timeout_seconds)


@lru_cache(maxsize=4096)
def is_readable(truth: str, *, timeout_seconds: float = DEFAULT_TIMEOUT) -> bool:
    """Whether math-verify reads ``truth`` (a ground truth, or an answer before several comparisons)
    as something it can compare."""
    return _check(["gold", truth], timeout_seconds)
