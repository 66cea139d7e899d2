"""Red team, round 9, on the http back end's replays: a dropped planned run whose answers had been taken (a fresh
answer budget, a MemoryError forgotten), a planned answer the tests never took deciding the status, prints without
a newline glued to the events, a service's byte cap read as characters, threads the code left keeping a run to its
wall clock, every run's output held until the end, and a service's deeply nested answer."""

from __future__ import annotations

import dataclasses
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tasks.sandbox import SandboxLimits, make_sandbox, run_tests
from tasks.sandbox_http import HttpSandbox
from tasks.sandbox_replay import ReplaySession
from tests.tasks.fake_sandbox_service import FakeSandboxFusion

LIMITS = SandboxLimits(wall_seconds=3, cpu_seconds=2, memory_mb=256)


def live_and_replayed(source: str, tests: list[str], service: FakeSandboxFusion, limits: SandboxLimits = LIMITS):
    live = run_tests(source, tests, make_sandbox({"backend": "process"})[0], limits)
    return live, run_tests(source, tests, HttpSandbox(service.url, retries=0), limits)


HANGS_IN_A_PLANNED_RUN = """import sys
def f(x):
    job = sys._getframe(1).f_locals.get("job", {})
    if x == 2:
        raise MemoryError("too big")
    if x == 3 and job.get("calls") and not job.get("silent"):
        while True:
            pass
    return x
"""


@pytest.mark.parametrize(("source", "tests", "limits"), [
    ("def f(n):\n    return list(range(600))\n", [f"assert f({i}) == list(range(600))" for i in range(4)],
     dataclasses.replace(LIMITS, answer_values=1000)),
    (HANGS_IN_A_PLANNED_RUN, ["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3"], LIMITS),
    ("def f(n):\n    return [0] * n\n", ["assert f(2) == [0, 0]", "if f(1) == [1]:\n    f(1000000000000)"], LIMITS),
], ids=["answer-budget", "dropped-memory-error", "unmade-planned-call"])
def test_replayed_runs_grade_as_live_whatever_a_planned_run_did(service, source, tests, limits):
    """Answers were taken from a planned run before it was dropped with its flags: a fresh answer budget (passed
    4/4, live failed), its MemoryError forgotten (0.67, live 0); and a planned call the tests never made decided the
    status (memory_limit, live passed)."""
    live, replayed = live_and_replayed(source, tests, service, limits)
    assert (replayed.status, replayed.fraction_passed) == (live.status, live.fraction_passed), (live, replayed)


@pytest.mark.parametrize("source", [
    "def add(a, b):\n    print('adding', end=' ')\n    return a + b\n",
    "import sys\nsys.stdout.write('ready')\ndef add(a, b):\n    return a + b\n",
    "import threading\nthreading.Timer(30, lambda: None).start()\ndef add(a, b):\n    return a + b\n",
], ids=["print-without-newline", "load-without-newline", "timer-thread-left"])
def test_honest_programs_that_passed_live_pass_on_the_service(service, source):
    live, replayed = live_and_replayed(source, ["assert add(1, 2) == 3", "assert add(2, 2) == 4"], service)
    assert (live.status, replayed.status, replayed.passed) == ("passed", "passed", 2), replayed
    assert replayed.seconds < LIMITS.wall_seconds


class ByteCapService(FakeSandboxFusion):
    """Keeps the first 1 MiB of a run's stdout as bytes, as SandboxFusion's runners do."""

    def run(self, request: dict) -> dict:
        answer = super().run(request)
        answer["run_result"]["stdout"] = answer["run_result"]["stdout"].encode()[:1 << 20].decode("utf-8", "ignore")
        return answer


def test_a_byte_cap_cut_in_multibyte_prints_is_seen_and_the_rest_asked_again():
    """Each call prints 200 kB of 'e' with an accent (100,000 characters): the cut at 1 MiB was not seen (counted in
    characters), and the answers past it never came; replayed calls' prints came again in every run."""
    source = "def accents(n):\n    print('\\u00e9' * 100_000)\n    return n\n"
    tests = [f"assert accents({i}) == {i}" for i in range(8)]
    capped = ByteCapService()
    try:
        result = run_tests(source, tests, HttpSandbox(capped.url, retries=0), dataclasses.replace(LIMITS, wall_seconds=8))
    finally:
        capped.close()
    assert (result.status, result.passed) == ("passed", 8) and result.rounds >= 2, result


def test_a_session_keeps_the_answers_not_every_runs_output(service):
    """Forty runs of 7 MB of prints held ~270 MB in the trainer until the session closed."""
    session = ReplaySession(HttpSandbox(service.url, retries=0).evaluate,
                            "import os\nos.write(1, b'x' * (1 << 20))\ndef f(i):\n    return i\n", LIMITS)
    for index in range(3):
        assert session.call(["f", [index], {"d": []}]).result() == index
    assert all(run.evaluation.events == "" for run in session.history) and len(session.history) == 3


class DeeplyNested(BaseHTTPRequestHandler):
    """A misbehaving service: 200,000 nested lists for any request."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b"[" * 200_000
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_a_services_deeply_nested_answer_is_no_verdict_not_a_crash():
    server = ThreadingHTTPServer(("127.0.0.1", 0), DeeplyNested)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sandbox = HttpSandbox(f"http://127.0.0.1:{server.server_address[1]}", retries=0)
        result = run_tests("def f():\n    return 1\n", ["assert f() == 1"], sandbox, LIMITS)
    finally:
        server.shutdown()
        server.server_close()
    assert result.status == "unavailable" and "RecursionError" in result.error, result
