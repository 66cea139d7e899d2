"""Per-run cost of the code sandbox's back ends: one correct solution graded against 3 tests.

Interleaved rounds; each round times one run of: a bare ``python -I -S -c pass`` process (the
floor any process-based sandbox pays), the unsafe ``process`` back end (a child with rlimits, the
audit hook and a network namespace where possible: the isolation before bubblewrap) and the
``bwrap`` back end (namespaces, an unprivileged user, read-only root, tmpfs, seccomp), and ``bwrap`` on a check of 20
sequential calls (one process answers them one at a time), also by a solution that prints a line to stderr on each
call. Then one group of
``--group`` completions through the code reward's worker pool (``--workers``) per back end.

    python3 bench/sandbox_overhead.py
    python3 bench/sandbox_overhead.py --rounds 50 --group 8 --workers 4
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from tasks.code import sandbox_results
from tasks.sandbox import SandboxLimits, make_sandbox, run_tests

SOLUTION = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]
SEQUENTIAL = ["def check(candidate):\n    for n in range(20):\n        assert candidate(n, n) == 2 * n\ncheck(add)"]
CHATTY = "import sys\ndef add(a, b):\n    print('add', a, b, file=sys.stderr)\n    return a + b\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="interleaved timed rounds (median reported)")
    parser.add_argument("--group", type=int, default=8, help="completions in the pooled group")
    parser.add_argument("--workers", type=int, default=4, help="sandbox_workers for the pooled group")
    args = parser.parse_args()
    limits = SandboxLimits(wall_seconds=10, cpu_seconds=5)
    backends = {name: make_sandbox({"backend": name})[0] for name in ("process", "bwrap")}
    runs = {
        "bare python -I -S": lambda: subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True),
        **{name: (lambda sandbox=sandbox: _check(run_tests(SOLUTION, TESTS, sandbox, limits)))
           for name, sandbox in backends.items()},
        "bwrap, 20 calls": lambda: _check(run_tests(SOLUTION, SEQUENTIAL, backends["bwrap"], limits)),
        "bwrap, 20 + prints": lambda: _check(run_tests(CHATTY, SEQUENTIAL, backends["bwrap"], limits)),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    print(f"one run, median of {args.rounds} interleaved rounds (min-max):")
    for name, seconds in times.items():
        print(f"  {name:20s} {1000 * statistics.median(seconds):6.1f} ms  ({1000 * min(seconds):.1f}-"
              f"{1000 * max(seconds):.1f})")
    print(f"a group of {args.group} completions, {args.workers} workers:")
    for name, sandbox in backends.items():
        completions = [f"```python\n{SOLUTION}# {name} {index} {time.time()}\n```" for index in range(args.group)]
        started = time.perf_counter()
        results = sandbox_results(completions, [TESTS] * args.group, sandbox, limits, args.workers)
        assert all(result.status == "passed" for result in results)
        print(f"  {name:20s} {1000 * (time.perf_counter() - started):6.1f} ms")


def _check(result) -> None:
    assert result.status == "passed", result


if __name__ == "__main__":
    main()
