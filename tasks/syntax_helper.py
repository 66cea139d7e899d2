"""The parse helper of :mod:`tasks.syntax`: a source's top-level names, parsed under a CPU limit.

Run as a script: read a source on stdin, write its top-level names as JSON (``null``: it does not parse), within
:data:`HELPER_CPU_SECONDS` of CPU. It imports only what the parse needs, so it starts isolated (``-I -S``) and fast:
it runs once per long source.
"""

from __future__ import annotations

import ast
import json
import resource
import sys

HELPER_CPU_SECONDS = 1
"""The helper's CPU limit (an honest 200 kB source parses in ~0.2 s)."""
HELPER_MEMORY_BYTES = 1 << 30


def parse_names(source: str) -> frozenset[str] | None:
    """The top-level functions, classes and variables ``source`` defines, or None when it does not parse."""
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
    names = parse_names(sys.stdin.buffer.read().decode("utf-8", "surrogatepass"))
    sys.stdout.write(json.dumps(None if names is None else sorted(names)))


if __name__ == "__main__":
    main()
