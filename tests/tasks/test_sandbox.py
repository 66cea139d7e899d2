"""The code sandbox: outcomes named per run, grading on returned values, back ends chosen and refused by name."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import pytest

import tasks.sandbox
from tasks import get_task, sandbox_user
from tasks.code import sandbox_results
from tasks.sandbox import SandboxLimits, make_sandbox, run_tests
from tasks.sandbox_bwrap import BwrapSandbox, SandboxUnavailable, unavailable_reason
from tasks.sandbox_child import encode
from tasks.sandbox_grading import decode, free_names
from tasks.sandbox_process import ProcessSandbox

ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]
CORRECT_ADD = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def bwrap() -> BwrapSandbox:
    try:
        return BwrapSandbox.from_options()
    except SandboxUnavailable as reason:
        pytest.skip(str(reason))


@pytest.fixture(params=["bwrap", "process"])
def sandbox(request, bwrap, tmp_path):
    """Each local back end (the unsafe one with its folders under ``tmp_path``, to check they are removed)."""
    return bwrap if request.param == "bwrap" else ProcessSandbox(temp_root=str(tmp_path))


@pytest.fixture()
def limits() -> SandboxLimits:
    return SandboxLimits(wall_seconds=15, cpu_seconds=2, memory_mb=256, file_size_mb=2)  # the CPU is shared


def test_a_correct_solution_passes_every_test_and_a_partial_one_a_share(sandbox, limits, tmp_path):
    correct = run_tests(CORRECT_ADD + "print('checked')", ADD_TESTS, sandbox, limits)
    assert (correct.status, correct.passed, correct.total, correct.fraction_passed) == ("passed", 3, 3, 1.0)
    assert correct.stdout == "checked\n" and correct.error is None and correct.rounds == 1
    partial = run_tests("def add(a, b):\n    return abs(a) + b\n", ADD_TESTS, sandbox, limits)
    assert (partial.status, partial.passed) == ("failed", 2)
    assert partial.fraction_passed == pytest.approx(2 / 3) and partial.error.startswith("test 1: AssertionError")
    assert os.listdir(tmp_path) == []


def test_any_number_of_sequential_calls_is_answered_by_one_run(sandbox, limits):
    """A HumanEval-shaped check: eight asserts in a row, then a loop of ten calls, each needing the last's answer
    first; and a stateful function sees every call, in order."""
    tests = ["def check(candidate):\n" + "".join(f"    assert candidate({n}, 1) == {n + 1}\n" for n in range(8))
             + "check(add)", "for n in range(10):\n    assert add(n, n) == 2 * n", "assert add(add(1, 1), 1) == 3",
             "assert [tick() for _ in range(12)] == list(range(1, 13))"]
    counter = "COUNT = [0]\ndef tick():\n    COUNT[0] += 1\n    return COUNT[0]\n"
    right = run_tests(CORRECT_ADD + counter, tests, sandbox, limits)
    assert (right.status, right.passed, right.rounds) == ("passed", 4, 1), right
    wrong = run_tests("def add(a, b):\n    return a * b\n" + counter, tests, sandbox, limits)
    assert (wrong.status, wrong.passed) == ("failed", 1) and wrong.error.startswith("test 0: AssertionError")


def test_tempfile_and_its_own_files_are_innocent(sandbox, limits):
    source = ("import tempfile\nwith tempfile.TemporaryDirectory() as folder, tempfile.TemporaryFile() as handle:\n"
              "    handle.write(b'4')\nopen('own.txt', 'w').write('0')\nOFFSET = int(open('own.txt').read())\n"
              "def add(a, b):\n    return a + b + OFFSET\n")
    result = run_tests(source, ADD_TESTS, sandbox, limits)
    assert result.status == "passed", result


@pytest.mark.parametrize("source, error", [
    ("def add(a, b:\n    return a", "SyntaxError"),
    ("raise RuntimeError('boom')", "RuntimeError: boom"),
    ("import sys\nsys.exit(3)", "SystemExit: 3"),
])
def test_code_that_does_not_run_is_an_error_with_its_exception(sandbox, limits, source, error):
    result = run_tests(source, ADD_TESTS, sandbox, limits)
    assert result.status == "error" and result.fraction_passed == 0 and result.error.startswith(error)


def test_limits_end_runs_with_named_statuses(sandbox, limits):
    assert run_tests("data = bytearray(10 * 1024 ** 3)", ADD_TESTS, sandbox, limits).status == "memory_limit"
    short = dataclasses.replace(limits, wall_seconds=3)
    sleeper = run_tests("import time\ntime.sleep(10_000)", ADD_TESTS, sandbox, short)
    assert sleeper.status == "timeout" and short.wall_seconds <= sleeper.seconds < short.wall_seconds + 2
    spinner = run_tests("while True:\n    pass", [], sandbox,
                        dataclasses.replace(limits, wall_seconds=30, cpu_seconds=1))
    assert spinner.status == "cpu_limit" and spinner.seconds < 30
    flood = run_tests("while True:\n    print('y' * 1_000_000)", ADD_TESTS, sandbox, limits)
    assert flood.status == "output_limit" and len(flood.stdout) <= limits.captured_bytes


def test_tests_run_here_on_plain_values_rebuilt_from_the_answers():
    # every kind a function may return comes back as the same plain value
    values = [None, True, 3, -2.5, float("inf"), "text", b"\x00\xff", 1 + 2j, [1, (2, 3)], {(1, 2): {"a": {4}}},
              frozenset({1})]
    assert [decode(encode(value)) for value in values] == values
    assert type(decode(encode(True))) is bool and type(decode(encode((1,)))) is tuple
    assert decode(encode((1, [2]))) == (1, [2])  # a tuple that cannot be hashed is still a tuple
    with pytest.raises(ValueError):
        decode({"s": [[1, 2]]})  # an unhashable member: refused, not crashed
    assert len(decode([k * (2 ** 61 - 1) for k in [1] * 1000])) == 1000  # equal values may share a hash
    assert free_names("def check(candidate):\n    assert candidate(1) == math.pi\ncheck(area)") == {"math", "area"}


def test_calls_that_need_answers_take_another_round_and_exceptions_keep_their_type(bwrap, limits):
    tests = ["assert twice(twice(2)) == 8", "values = twice([1])\nvalues.append(0)\nassert values == [1, 1, 0]",
             "assert twice([1]) == [1, 1]", "try:\n    twice('x' * 3, strict=True)\nexcept ValueError:\n    pass\n"
             "else:\n    raise AssertionError('no ValueError')", "import math\nassert math.isclose(twice(0.5), 1.0)"]
    source = ("def twice(value, strict=False):\n    if strict and isinstance(value, str):\n"
              "        raise ValueError('numbers only')\n    return value * 2\n")
    result = run_tests(source, tests, bwrap, limits)
    assert (result.status, result.passed, result.rounds) == ("passed", 5, 1)


def test_standard_library_values_keep_their_kind_both_ways(limits, sandbox):
    """A Counter keeps its methods, an OrderedDict its order in comparisons; a deque or a Fraction comes back at all
    (they failed as "not plain data" before); and each travels into a call as an argument too. Not a Decimal."""
    source = ("import collections, fractions, decimal\ndef tally(text):\n    return collections.Counter(text)\n"
              "def ordered(pairs):\n    return collections.OrderedDict(pairs)\ndef window(items):\n"
              "    return collections.deque(items, maxlen=2)\ndef half(value):\n    return value / 2\n"
              "def price(text):\n    return decimal.Decimal(text)\ndef kind(value):\n    return type(value).__name__\n"
              "def echo(value):\n    assert type(value) in (bytes, bytearray)\n    return value\n")
    tests = ["assert tally('abca').most_common(1) == [('a', 2)]",
             "from collections import OrderedDict\nassert ordered([(2, 1), (1, 2)]) != OrderedDict([(1, 2), (2, 1)])",
             "from collections import deque\nassert window([1, 2, 3]) == deque([2, 3]) and window([]).maxlen == 2",
             "assert type(echo(bytearray(b'ab'))) is bytearray and echo(b'ab') == b'ab'",
             "from fractions import Fraction\nassert half(Fraction(1, 3)) == Fraction(1, 6)",
             "from collections import Counter, OrderedDict, deque\nfrom fractions import Fraction\n"
             "assert [kind(v) for v in (Counter('a'), OrderedDict(), deque(), Fraction(1))] == "
             "['Counter', 'OrderedDict', 'deque', 'Fraction']",
             "price('1.5')"]
    result = run_tests(source, tests, sandbox, limits)
    assert (result.status, result.passed) == ("failed", len(tests) - 1), result
    assert "test 6: TypeError: a value of type Decimal cannot be returned" in result.error


@pytest.mark.parametrize("encoded, error", [
    ({"q": [1, 0]}, "not zero"), ({"q": [1.5, 2]}, "two ints"), ({"q": [{"n": "1" * 20_000}, 3]}, "bits"),
    ({"ct": [[[1], 2]]}, "unhashable"), ({"m": "1"}, "unknown tag"),
])
def test_library_values_the_trainer_could_not_use_cheaply_are_refused(encoded, error):
    """A fraction of 4-million-bit parts takes seconds to reduce; a Decimal (``m``, never encoded) compared with a wide
    int held the trainer's GIL for 20 s."""
    with pytest.raises(ValueError, match=error):
        decode(encoded)


def test_a_default_thread_pool_fits_the_thread_limit_whatever_the_host_cpu_count(bwrap, limits):
    """The code sees at most ``processes - 6`` CPUs, so ``ThreadPoolExecutor()`` (CPUs + 4 workers) starts all its
    threads: at ``processes`` 6 on two CPUs it needed 6 threads beside the main one, and failed, as it would at the
    default 32 on a host of 28 CPUs or more."""
    source = ("import os, time\nfrom concurrent.futures import ThreadPoolExecutor\ndef pooled(n):\n"
              "    with ThreadPoolExecutor() as pool:\n        return sum(pool.map(lambda x: time.sleep(0.05) or x, "
              "range(n)))\ndef cpus():\n    return os.cpu_count()\n")
    tight = dataclasses.replace(limits, processes=6)
    result = run_tests(source, ["assert pooled(40) == 780", "assert cpus() == 1"], bwrap, tight)
    assert (result.status, result.passed) == ("passed", 2), result
    roomy = run_tests(source, [f"assert cpus() == {min(len(os.sched_getaffinity(0)), 26)}"], bwrap, limits)
    assert roomy.status == "passed", roomy


def test_a_value_that_is_not_plain_data_fails_its_test(bwrap, limits):
    result = run_tests("class Box:\n    pass\ndef add(a, b):\n    return Box()", ADD_TESTS, bwrap, limits)
    assert result.status == "failed" and "cannot be returned out of the sandbox" in result.error


def test_the_backend_is_chosen_by_name_and_the_unsafe_one_says_so(caplog, tmp_path):
    with caplog.at_level(logging.WARNING, logger="tasks.sandbox"):
        sandbox, limits = make_sandbox({"backend": "process", "wall_seconds": 2, "temp_root": str(tmp_path)})
    assert isinstance(sandbox, ProcessSandbox) and sandbox.unsafe and limits.wall_seconds == 2
    assert "UNSAFE sandbox" in caplog.text
    assert run_tests(CORRECT_ADD, ADD_TESTS, sandbox, limits).isolation.startswith("process (UNSAFE")
    with pytest.raises(KeyError, match="unknown sandbox back end 'docker'"):
        make_sandbox({"backend": "docker"})
    with pytest.raises(ValueError, match="sandbox memory_mb must be positive"):
        make_sandbox({"backend": "process", "memory_mb": 0})
    with pytest.raises(TypeError, match="unexpected keyword argument 'wall_second'"):
        make_sandbox({"backend": "process", "wall_second": 1})


def test_without_bubblewrap_the_code_task_refuses_to_start_naming_the_install(monkeypatch):
    unavailable_reason.cache_clear()
    monkeypatch.setattr(tasks.sandbox, "DEFAULT_BACKEND", "bwrap")  # the shipped default, whatever the tests use
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        with pytest.raises(SandboxUnavailable, match="'bwrap' is not installed.*apt-get install bubblewrap.*"
                                                     "backend=process"):
            get_task("code")
        assert get_task("code", sandbox={"backend": "process", "network_namespace": False}).sandbox.unsafe
    finally:
        unavailable_reason.cache_clear()


def test_the_process_backend_keeps_its_audit_hook_and_removes_its_folders(limits, tmp_path):
    sandbox = ProcessSandbox(temp_root=str(tmp_path / "runs"))
    os.mkdir(tmp_path / "runs")
    secret = tmp_path / "secret.txt"
    secret.write_text("the-secret-value")
    result = run_tests(f"try:\n    print(open({str(secret)!r}).read())\nexcept OSError:\n    pass\n{CORRECT_ADD}",
                       ADD_TESTS, sandbox, limits)
    assert result.status == "forbidden" and result.violations == (f"file access: open {str(secret)!r}",)
    assert "the-secret-value" not in result.stdout and os.listdir(tmp_path / "runs") == []


def test_results_are_computed_once_per_completion_for_both_rewards(bwrap, limits):
    completions = ["```python\n" + CORRECT_ADD + "```", "no code"]
    first = sandbox_results(completions, [ADD_TESTS] * 2, bwrap, limits, workers=2)
    assert first[0].status == "passed" and first[1] is None
    assert sandbox_results(completions, [ADD_TESTS] * 2, bwrap, limits, workers=2)[0] is first[0]


def test_the_folders_covered_for_the_unprivileged_user_are_tmp_and_the_topmost_unsearchable_ones(tmp_path):
    shut = tmp_path / "home"
    (shut / "inner").mkdir(parents=True, mode=0o700)
    shut.chmod(0o700)
    paths = [str(shut / "inner" / "python"), str(shut / "child.py"), "/usr/bin/env"]
    (topmost,) = sandbox_user.covered_folders(paths, always=())  # shut, or a shut folder above it
    assert str(shut).startswith(topmost) and not os.stat(topmost).st_mode & 0o001
    assert all(os.stat(parent).st_mode & 0o001 for parent in Path(topmost).parents)
    assert sandbox_user.covered_folders(paths) == ["/tmp"]  # tmp_path is under /tmp, covered already


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="disk_mb"):
        SandboxLimits(disk_mb=0)


def test_the_child_program_imports_only_the_standard_library():
    import ast
    import sys

    from tasks import sandbox_child
    tree = ast.parse(Path(sandbox_child.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    assert imported <= set(sys.stdlib_module_names)
