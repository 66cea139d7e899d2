"""Results of costly work on untrusted input (a parse, a sandbox run), made once per distinct input however many
threads ask for it at the same time, and kept within bounds.

A group of G completions often holds the same code several times (a policy that has converged writes one
solution), and the reward workers grade them concurrently: without sharing the work in progress, each copy would
start its own sandbox run or parse helper.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Callable, Generic, Hashable, Mapping, TypeVar

Value = TypeVar("Value")


def digest(text: str) -> bytes:
    """A key for ``text`` that does not hold the text (200 kB completions would fill memory)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class SharedResults(Generic[Value]):
    """The values of the latest ``size`` keys; a key another thread is making is waited for, not made again.

    ``budgets`` bound the sum of each weight ``weigh`` gives the kept values (e.g. characters held): past a budget,
    or past ``size`` entries, the oldest finished entries are dropped (never the newest). A value ``keep`` refuses
    (e.g. a run the sandbox could not make) is given to the threads waiting for it but not kept, so the next call
    makes it again; so is an exception.
    """

    def __init__(self, size: int, budgets: Mapping[str, int] | None = None,
                 weigh: Callable[[Value], Mapping[str, int]] | None = None,
                 keep: Callable[[Value], bool] | None = None) -> None:
        self.size, self.budgets = size, dict(budgets or {})
        self.weigh, self.keep = weigh or (lambda _: {}), keep or (lambda _: True)
        self.held = dict.fromkeys(self.budgets, 0)
        self.entries: OrderedDict[Hashable, Future[Value]] = OrderedDict()
        self.weights: dict[Hashable, Mapping[str, int]] = {}
        self.lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], Value]) -> Value:
        with self.lock:
            entry, owner = self.entries.get(key), key not in self.entries
            if owner:
                entry = self.entries[key] = Future()
            else:
                self.entries.move_to_end(key)
        if not owner:
            return entry.result()
        try:
            value = make()
        except BaseException as error:
            with self.lock:
                self._forget(key, entry)
                entry.set_exception(error)
            raise
        with self.lock:
            if self.keep(value) and self.entries.get(key) is entry:
                self.weights[key] = self.weigh(value)
                for name, weight in self.weights[key].items():
                    self.held[name] = self.held.get(name, 0) + weight
            else:
                self._forget(key, entry)
            entry.set_result(value)
            self._evict()
        return value

    def _forget(self, key: Hashable, entry: Future) -> None:
        if self.entries.get(key) is entry:
            del self.entries[key]

    def _evict(self) -> None:
        """Drop the oldest finished entries while there are too many, or a budget is exceeded."""
        for key, entry in list(self.entries.items())[:-1]:
            if len(self.entries) <= self.size and all(self.held[n] <= limit for n, limit in self.budgets.items()):
                return
            if entry.done():
                del self.entries[key]
                for name, weight in self.weights.pop(key, {}).items():
                    self.held[name] -= weight
