"""Red team, round 6: breaks that are not escapes. Huge answers that cost the trainer's CPU per call, a pause per
line of an honest program's prints, ``if __name__ == "__main__":`` blocks that made correct code score 0, and the
source parsed (in a helper process, one after another) twice per completion."""

from __future__ import annotations

import dataclasses
import subprocess
import threading

import pytest

from tasks import syntax, syntax_helper
from tasks.code import code_passed, code_syntax, code_tests
from tasks.sandbox import SandboxLimits, run_tests
from tasks.sandbox_grading import CallOutcome, count_values
from tasks.sandbox_process import ProcessSandbox
from tests.tasks.test_sandbox_redteam import ADD_TESTS, CORRECT_ADD, limits, sandbox  # noqa: F401 - fixtures
from tests.tasks.test_sandbox_redteam5 import trainer_cpu

HUGE_ANSWER = "def many():\n    return {frozenset({i}) for i in range(33_000)}\n"
"""99,002 values an answer as encoded (one may hold 100,000): ~0.8 s of the trainer's CPU per call before."""


def test_huge_answers_end_the_run_within_its_answer_budget(sandbox, limits):
    """Thirty such calls cost the trainer ~15 s of CPU (the GIL held) before, until the wall clock; an honest run
    beside it timed out. Now the run ends (``failed``) once its answers hold more than ``answer_values``."""
    honest: list = []
    beside = threading.Thread(target=lambda: honest.append(run_tests(
        CORRECT_ADD, ["for n in range(200):\n    assert add(n, 1) == n + 1"], sandbox,
        dataclasses.replace(limits, wall_seconds=6))))
    started = trainer_cpu()
    beside.start()
    result = run_tests(HUGE_ANSWER, ["for _ in range(30):\n    assert len(many()) == 33_000"], sandbox,
                       dataclasses.replace(limits, file_size_mb=8))  # the default: a 2 MB cap ends it at 4 answers
    beside.join()
    assert result.status == "failed" and result.passed == 0 and "answer_values" in result.error, result
    assert trainer_cpu() - started < 2.0
    assert honest[0].status == "passed", honest[0]


def test_many_honest_answers_fit_the_answer_budget(sandbox, limits):
    tests = ["for n in range(100):\n    assert squares(1_000)[n] == n * n"]
    result = run_tests("def squares(n):\n    return [i * i for i in range(n)]\n", tests, sandbox, limits)
    assert result.status == "passed", result
    with pytest.raises(ValueError, match="answer_values"):
        SandboxLimits(answer_values=0)


def test_each_use_of_an_answer_is_a_fresh_value():
    """A replayed call's outcome is used again: each use gets its own value, rebuilt from the answer as encoded."""
    encoded = [{"fs": [1]}, {"t": [2, [3]]}]
    outcome = CallOutcome.answer(encoded, count_values(encoded))
    first = outcome.result()
    first.append(4)
    first[1][1].append(0)
    second = outcome.result()
    assert second == [frozenset({1}), (2, [3])] and second is not first
    second[1][1].append(0)
    assert outcome.result() == [frozenset({1}), (2, [3])]


CHATTY_ADD = ("import sys\ndef add(a, b):\n    print('add', a, b, file=sys.stderr)\n"
              "    print('add', a, b, flush=True)\n    return a + b\n")


def test_a_correct_solution_that_prints_on_every_call_is_not_slowed(sandbox, limits):
    """Each short read of its prints paid a 2 ms pause: 4,000 calls took ~9 s (without prints: ~0.3 s)."""
    tests = ["for n in range(4_000):\n    assert add(n, 1) == n + 1"]
    result = run_tests(CHATTY_ADD, tests, sandbox, dataclasses.replace(limits, wall_seconds=5))
    assert result.status == "passed", result
    assert result.stderr.endswith("add 3999 1\n")


MAIN_BLOCKS = {
    "input": "if __name__ == '__main__':\n    a, b = map(int, input().split())\n    print(add(a, b))\n",
    "unittest": ("import unittest\nclass TestAdd(unittest.TestCase):\n    def test_add(self):\n"
                 "        self.assertEqual(add(1, 2), 3)\nif __name__ == '__main__':\n    unittest.main()\n"),
    "exit": ("import sys\ndef main():\n    print(add(2, 3))\n    return 0\n"
             "if __name__ == '__main__':\n    sys.exit(main())\n"),
    "argv": "import sys\nif __name__ == '__main__':\n    print(add(int(sys.argv[1]), int(sys.argv[2])))\n",
    "stdin": ("import sys\nif __name__ == '__main__':\n    for line in sys.stdin:\n"
              "        print(add(*map(int, line.split())))\n"),
    "unguarded": ("import argparse, sys\nparser = argparse.ArgumentParser()\n"
                  "parser.add_argument('--n', type=int, default=3)\nARGS = parser.parse_args()\n"
                  "DATA = sys.stdin.read()\n"),
}


@pytest.mark.parametrize("block", list(MAIN_BLOCKS), ids=list(MAIN_BLOCKS))
def test_a_correct_function_followed_by_a_main_block_scores_full_marks(sandbox, limits, block):
    """The candidate ran as ``__main__``: its main block read the job channel (stdin) until the wall clock, ran
    ``unittest.main()`` or ``sys.exit()`` (an error), or read the child's own arguments. Now it loads as a module
    of its own, with its own ``sys.argv`` and stdin at its end."""
    result = run_tests(CORRECT_ADD + MAIN_BLOCKS[block], ADD_TESTS, sandbox,
                       dataclasses.replace(limits, wall_seconds=5))
    assert (result.status, result.passed) == ("passed", 3), result


def test_the_candidate_is_a_module_of_its_own_and_its_stdin_is_at_its_end(sandbox, limits):
    source = ("import sys\nNAME, ARGV = __name__, list(sys.argv)\ndef facts():\n"
              "    return [NAME, ARGV, sys.stdin.read(), __import__(NAME).facts is facts]\n"
              "def ask():\n    return input()\n")
    tests = ["assert facts() == ['solution', ['solution.py'], '', True]",
             "try:\n    ask()\nexcept EOFError:\n    pass\nelse:\n    raise AssertionError('input() answered')"]
    result = run_tests(source, tests, sandbox, limits)
    assert result.status == "passed", result


LONG = "# " + "x" * syntax.IN_PROCESS_CHARS + "\n"
"""Padding that sends a source to the parse helper."""


class CountingPopen(subprocess.Popen):
    """Popen that notes each start of the parse helper, and how many earlier ones were still running then."""

    started: list[tuple[CountingPopen, int]] = []

    def __init__(self, args, *rest, **options) -> None:
        super().__init__(args, *rest, **options)
        if syntax_helper.__file__ in map(str, args):
            CountingPopen.started.append((self, sum(other.poll() is None for other, _ in CountingPopen.started)))


def test_each_distinct_source_is_parsed_once_by_helpers_running_at_once(monkeypatch, tmp_path):
    """``code_syntax`` and the sandbox path each parsed every completion, one helper after another."""
    monkeypatch.setattr(subprocess, "Popen", CountingPopen)
    monkeypatch.setattr(CountingPopen, "started", [])
    monkeypatch.setattr(syntax, "PARSES", syntax.ParseCache())
    sources = [f"{CORRECT_ADD}{LONG}# {index}\n" for index in range(3)]
    completions = [f"```python\n{source}```" for source in sources + sources[:1]]
    assert code_syntax(completions, workers=4) == [1.0] * 4
    assert len(CountingPopen.started) == 3 and max(overlap for _, overlap in CountingPopen.started) >= 1
    sandbox = ProcessSandbox(network_namespace=False, temp_root=str(tmp_path))
    options = {"sandbox": sandbox, "limits": SandboxLimits(wall_seconds=15), "workers": 2}
    assert code_tests(completions, [ADD_TESTS] * 4, **options) == [1.0] * 4
    assert code_passed(completions, [ADD_TESTS] * 4, **options) == [1.0] * 4
    assert len(CountingPopen.started) == 3


def test_the_parse_cache_keeps_the_latest_sources_and_a_bounded_count_of_names():
    cache = syntax.ParseCache(size=2, max_names=3)
    assert cache.names("a = 1\nb = 2") == {"a", "b"} and cache.names("def (") is None
    assert cache.names("c = 3") == {"c"} and len(cache.entries) == 2 and cache.held["names"] == 1
    cache.names("d = e = f = g = 4")
    assert len(cache.entries) == 1 and cache.held["names"] == 4  # the newest is kept, whatever it holds
