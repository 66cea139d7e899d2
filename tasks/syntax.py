"""Parse untrusted Python source (a completion's code) without holding the trainer's GIL for long.

CPython's parser can be made superlinear: one f-string of 66,000 ``{1}`` fields (~198 kB, under
``max_completion_chars``) takes ~4 s of CPU, the GIL held, stalling every reward worker beside it. A
source of at most :data:`IN_PROCESS_CHARS` (honest ones are a few kB) is parsed here, costing at most
a few tens of milliseconds; a longer one is parsed by this file run as a short-lived helper process
under a CPU limit of :data:`HELPER_CPU_SECONDS` (this process waits with the GIL released). A parse
that fails, or runs past its limit, makes the source unparseable (None).

Run as a script: read a source on stdin, write its top-level names as JSON (``null``: it does not parse).
Only the standard library is imported here, so the helper starts isolated (``-I -S``).
"""

from __future__ import annotations

import ast
import json
import resource
import subprocess
import sys

IN_PROCESS_CHARS = 8_000
"""Longest source parsed in this process: the 66,000-field f-string scaled down to this costs ~0.02 s."""
HELPER_CPU_SECONDS = 1
"""The helper's CPU limit (an honest 200 kB source parses in ~0.2 s)."""
HELPER_MEMORY_BYTES = 1 << 30
HELPER_WALL_SECONDS = 10.0
"""Backstop on a busy machine: past it the helper is killed and the source counts as unparseable."""


def top_level_names(source: str) -> frozenset[str] | None:
    """The top-level functions, classes and variables ``source`` defines (never run), or None when it does not
    parse (within the bounds above)."""
    if len(source) <= IN_PROCESS_CHARS:
        return _names(source)
    try:
        helper = subprocess.run([sys.executable, "-I", "-S", __file__], input=source.encode("utf-8", "surrogatepass"),
                                capture_output=True, timeout=HELPER_WALL_SECONDS)
    except subprocess.TimeoutExpired:
        return None
    if helper.returncode != 0:
        return None
    names = json.loads(helper.stdout)
    return None if names is None else frozenset(names)


def _names(source: str) -> frozenset[str] | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names.update(name.id for target in targets if target is not None for name in ast.walk(target)
                     if isinstance(name, ast.Name))
    return frozenset(names)


def main() -> None:
    """The helper: limit itself, parse stdin, print the names."""
    resource.setrlimit(resource.RLIMIT_CPU, (HELPER_CPU_SECONDS, HELPER_CPU_SECONDS + 1))
    resource.setrlimit(resource.RLIMIT_AS, (HELPER_MEMORY_BYTES, HELPER_MEMORY_BYTES))
    names = _names(sys.stdin.buffer.read().decode("utf-8", "surrogatepass"))
    sys.stdout.write(json.dumps(None if names is None else sorted(names)))


if __name__ == "__main__":
    main()
