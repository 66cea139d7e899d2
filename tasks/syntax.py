"""Parse untrusted Python source (a completion's code) without holding the trainer's GIL for long.

CPython's parser can be made superlinear: one f-string of 66,000 ``{1}`` fields (~198 kB, under
``max_completion_chars``) takes ~4 s of CPU, the GIL held, stalling every reward worker beside it. A
source of at most :data:`IN_PROCESS_CHARS` (honest ones are a few kB) is parsed here, costing at most
a few tens of milliseconds; a longer one by a short-lived helper process (:mod:`tasks.syntax_helper`) under a CPU
limit of :data:`~tasks.syntax_helper.HELPER_CPU_SECONDS` (this process waits with the GIL released). A parse that
fails, or runs past its limit, makes the source unparseable (None).

Each distinct source is parsed once (:class:`ParseCache`, keyed by a digest: the syntax reward, the sandbox's grading
and the task's row checks share it), and :func:`names_of_all` starts the helpers of a batch's long sources at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from tasks import syntax_helper
from tasks.shared_results import SharedResults, digest

IN_PROCESS_CHARS = 8_000
"""Longest source parsed in this process: the 66,000-field f-string scaled down to this costs ~0.02 s."""
HELPER_WALL_SECONDS = 10.0
"""Backstop on a busy machine: past it the helper is killed and the source counts as unparseable."""
CACHED_SOURCES = 4096
CACHED_NAMES = 200_000
"""Most names the cache holds in all (a 200 kB source may define ~50,000): past it the oldest sources are dropped."""
CACHED_NAME_CHARS = 4_000_000
"""Most characters of names the cache holds in all (one top-level name may be ~200,000 characters long: 4,096 such
sources held ~815 MB): past it the oldest sources are dropped."""
Names = frozenset[str] | None


class ParseCache(SharedResults[Names]):
    """The top-level names of the latest ``size`` distinct sources, at most ``max_names`` names and ``max_chars``
    characters of names in all, keyed by a digest of the source (not the source itself). A source another thread
    is parsing is waited for, not parsed again."""

    def __init__(self, size: int = CACHED_SOURCES, max_names: int = CACHED_NAMES,
                 max_chars: int = CACHED_NAME_CHARS) -> None:
        super().__init__(size, {"names": max_names, "chars": max_chars}, weigh=_weight)

    def names(self, source: str) -> Names:
        """``source``'s names, parsed unless cached; a parse helper that could not start raises (nothing kept)."""
        return self.get(digest(source), lambda: _parse(source))


def _weight(names: Names) -> dict[str, int]:
    return {"names": len(names or ()), "chars": sum(map(len, names or ()))}


PARSES = ParseCache()


def top_level_names(source: str) -> Names:
    """The top-level functions, classes and variables ``source`` defines (never run), or None when it does not
    parse (within the bounds above). Cached: :data:`PARSES`."""
    return PARSES.names(source)


def names_of_all(sources: Sequence[str], workers: int) -> list[Names]:
    """:func:`top_level_names` of each source; the helpers of the distinct long ones not cached run ``workers`` at
    once."""
    helped = list(dict.fromkeys(source for source in sources if len(source) > IN_PROCESS_CHARS))
    if len(helped) > 1 and workers > 1:
        with ThreadPoolExecutor(max_workers=min(workers, len(helped))) as pool:
            list(pool.map(PARSES.names, helped))
    return [PARSES.names(source) for source in sources]


def _parse(source: str) -> Names:
    """The names, parsed here or by the helper (uncached)."""
    if len(source) <= IN_PROCESS_CHARS:
        return syntax_helper.parse_names(source)
    try:
        helper = subprocess.run([sys.executable, "-I", "-S", syntax_helper.__file__],
                                input=source.encode("utf-8", "surrogatepass"), capture_output=True,
                                timeout=HELPER_WALL_SECONDS)
    except subprocess.TimeoutExpired:
        return None
    if helper.returncode != 0:
        return None
    names = json.loads(helper.stdout)
    return None if names is None else frozenset(names)
