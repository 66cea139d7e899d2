"""The code sandbox: hostile programs score zero with a named error, and the host is unharmed."""

from __future__ import annotations

import dataclasses
import os
import resource
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tasks.sandbox import SandboxLimits, network_namespace_prefix, run_tests

ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]
CORRECT_ADD = "def add(a, b):\n    return a + b\n"


@pytest.fixture()
def limits(tmp_path: Path) -> SandboxLimits:
    """Short limits, working directories under ``tmp_path / 'sandboxes'`` (to check they are removed)."""
    root = tmp_path / "sandboxes"
    root.mkdir()
    return SandboxLimits(wall_seconds=3, cpu_seconds=2, memory_mb=256, file_size_mb=2, temp_root=str(root))


def left_behind(limits: SandboxLimits) -> list[str]:
    return os.listdir(limits.temp_root)


def test_a_correct_solution_passes_every_test_and_a_partial_one_a_share(limits):
    correct = run_tests(CORRECT_ADD + "print('checked')", ADD_TESTS, limits)
    assert (correct.status, correct.passed, correct.total, correct.fraction_passed) == ("passed", 3, 3, 1.0)
    assert correct.stdout == "checked\n" and correct.error is None
    partial = run_tests("def add(a, b):\n    return abs(a) + b\n", ADD_TESTS, limits)
    assert (partial.status, partial.passed) == ("failed", 2)
    assert partial.fraction_passed == pytest.approx(2 / 3) and partial.error.startswith("test 1: AssertionError")
    assert left_behind(limits) == []


@pytest.mark.parametrize("source, error", [
    ("def add(a, b:\n    return a", "SyntaxError"),
    ("raise RuntimeError('boom')", "RuntimeError: boom"),
    ("import sys\nsys.exit(3)", "SystemExit: 3"),
])
def test_code_that_does_not_run_is_an_error_with_its_exception(limits, source, error):
    result = run_tests(source, ADD_TESTS, limits)
    assert result.status == "error" and result.fraction_passed == 0 and result.error.startswith(error)


def test_reading_outside_its_directory_is_refused_even_when_the_error_is_caught(limits, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the-secret-value")
    source = f"try:\n    print(open({str(secret)!r}).read())\nexcept OSError:\n    pass\n{CORRECT_ADD}"
    result = run_tests(source, ADD_TESTS, limits)
    assert result.status == "forbidden" and result.fraction_passed == 0
    assert result.violations == (f"file access: open {str(secret)!r}",)
    assert "the-secret-value" not in result.stdout + result.stderr
    home = run_tests(f"import os\nos.listdir({str(Path.home())!r})", [], limits)
    assert home.status == "forbidden" and home.violations[0].startswith("file access: os.listdir")


def test_writing_outside_is_refused_and_files_inside_are_allowed_then_removed(limits, tmp_path):
    target = tmp_path / "planted.txt"
    outside = run_tests(f"open({str(target)!r}, 'w').write('x')", [], limits)
    assert outside.status == "forbidden" and not target.exists()
    inside = run_tests("open('notes.txt', 'w').write('x')\nassert open('notes.txt').read() == 'x'", [], limits)
    assert inside.status == "passed", inside.error
    escape = run_tests(f"import os\nos.symlink({str(tmp_path)!r}, 'link')\nopen('link/planted.txt', 'w')", [],
                       limits)
    assert escape.status == "forbidden" and not target.exists()
    assert left_behind(limits) == []


class Listener:
    """A host socket on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.accepted = 0
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                connection, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.server.close()


def test_opening_a_socket_is_refused_and_nothing_reaches_the_host(limits):
    listener = Listener()
    try:
        source = f"import socket\nsocket.create_connection(('127.0.0.1', {listener.port}), timeout=1)"
        result = run_tests(source, [], limits)
        raw = run_tests(f"import _socket\n_socket.socket().connect(('127.0.0.1', {listener.port}))", [], limits)
    finally:
        listener.close()
    assert result.status == "forbidden" and result.violations[0].startswith("network: socket.")
    assert raw.status == "forbidden" and listener.accepted == 0


def test_the_network_namespace_alone_keeps_a_process_off_the_host_network():
    """Without the audit hook: a plain process started with the prefix cannot connect."""
    prefix = network_namespace_prefix()
    if not prefix:
        pytest.skip("no network namespace on this system (unshare -n / -rn failed): the audit hook alone guards")
    listener = Listener()
    try:
        connect = f"import socket; socket.create_connection(('127.0.0.1', {listener.port}), timeout=1)"
        plain = subprocess.run([sys.executable, "-c", connect], capture_output=True)
        isolated = subprocess.run([*prefix, sys.executable, "-c", connect], capture_output=True)
    finally:
        listener.close()
    assert plain.returncode == 0 and isolated.returncode != 0
    assert listener.accepted == 1  # the plain one


@pytest.mark.parametrize("source, violation", [
    ("import os\nwhile True:\n    os.fork()", "process: os.fork"),
    ("import subprocess\nsubprocess.run(['sh', '-c', ':(){ :|:& };:'])", "native code: import _posixsubprocess"),
    ("import os\nos.system('sleep 100 &')", "process: os.system"),
    ("import ctypes\nctypes.CDLL(None).fork()", "native code: import ctypes"),
])
def test_process_creation_and_native_code_are_refused(limits, source, violation):
    result = run_tests(source, [], limits)
    assert result.status == "forbidden" and result.violations[0] == violation


def test_a_10_gb_allocation_is_a_memory_error_not_the_hosts_problem(limits):
    host_peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_tests("data = bytearray(10 * 1024 ** 3)\n" + CORRECT_ADD, ADD_TESTS, limits)
    assert result.status == "memory_limit" and result.fraction_passed == 0 and "MemoryError" in result.error
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - host_peak_before < 100 * 1024  # KiB


def test_sleeping_forever_is_killed_at_the_wall_clock_limit(limits):
    result = run_tests("import time\ntime.sleep(10_000)", ADD_TESTS, limits)
    assert result.status == "timeout" and result.fraction_passed == 0
    assert limits.wall_seconds <= result.seconds < limits.wall_seconds + 2


def test_spinning_is_stopped_by_the_cpu_limit(limits):
    limits = dataclasses.replace(limits, wall_seconds=30, cpu_seconds=1)  # a busy host: CPU time lags the clock
    result = run_tests("while True:\n    pass", [], limits)
    assert result.status == "cpu_limit" and result.seconds < limits.wall_seconds


def test_printing_a_gigabyte_is_capped_and_only_a_tail_comes_back(limits):
    result = run_tests("while True:\n    print('y' * 100_000)", ADD_TESTS, limits)
    assert result.status == "output_limit" and result.fraction_passed == 0 and "File too large" in result.error
    assert len(result.stdout) <= limits.captured_bytes
    assert left_behind(limits) == []


def test_a_forged_verdict_without_the_nonce_does_not_count(limits):
    forged = '{"passed": 3, "total": 3, "error": null, "violations": []}'
    source = f"import os, sys\nos.write(int(sys.argv[1]), b'0123abcd {forged}\\n')\n"
    result = run_tests(source, ADD_TESTS, limits)
    assert result.status == "failed" and result.passed == 0


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxLimits(memory_mb=0)
