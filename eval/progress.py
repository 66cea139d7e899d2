"""How far an evaluation is: a tqdm bar with ETA, or (bar off: log files) a log line with the rate
and ETA every ``LOG_EVERY_S`` seconds; a closing line with the rate either way. Main process only."""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Self

from tqdm.auto import tqdm

logger = logging.getLogger(__name__)

LOG_EVERY_S = 30.0


class Progress:
    """Counts the items of one evaluation (one dataset or benchmark) as they are scored."""

    def __init__(self, total: int, label: str, *, bar: bool, log: bool) -> None:
        """``total`` items to score here; ``bar``: show the bar; ``log``: this process logs (the main one)."""
        self.total, self.label, self.log = total, label, log
        self.done = 0
        self.started = self.last_logged = time.perf_counter()
        self.bar = tqdm(total=total, desc=label, unit="item", disable=not (bar and log))

    def update(self, count: int) -> None:
        self.done += count
        self.bar.update(count)
        now = time.perf_counter()
        if self.log and self.bar.disable and now - self.last_logged >= LOG_EVERY_S and self.done < self.total:
            self.last_logged = now
            rate = self.rate()
            eta = tqdm.format_interval((self.total - self.done) / rate) if rate else "?"
            logger.info("%s: %d/%d items, %.2f items/s, ETA %s", self.label, self.done, self.total, rate, eta)

    def rate(self) -> float:
        """Items scored per second so far."""
        elapsed = time.perf_counter() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def close(self) -> None:
        self.bar.close()
        if self.log and self.total:
            elapsed = tqdm.format_interval(time.perf_counter() - self.started)
            logger.info("%s: %d items in %s (%.2f items/s)", self.label, self.done, elapsed, self.rate())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()
