"""Run untrusted Python (a model's completion) against unit tests: the sandbox seam and the grading loop.

A :class:`Sandbox` back end runs the code and answers calls (``add(1, 2)`` -> an encoded value),
one at a time through a :class:`Session` (one process per graded program), nothing more: :func:`run_tests` runs the tests here, on the returned values
(:mod:`tasks.sandbox_grading`), so the untrusted process never sees a test or an expected
value and cannot take part in a comparison. Back ends, one file each, registered by name:

- ``bwrap`` (:mod:`tasks.sandbox_bwrap`, the default on Linux): bubblewrap namespaces, a
  read-only view of the interpreter only, a private size-limited tmpfs, a seccomp filter;
- ``http`` (:mod:`tasks.sandbox_http`): a SandboxFusion-compatible service, for clusters;
- ``process`` (:mod:`tasks.sandbox_process`): a plain child process with rlimits and an audit
  hook. Unsafe, opt-in only: it is labelled as such in the log and every result.

Every run ends in a :class:`SandboxResult` whose ``status`` names what happened; a run that
broke a rule (``forbidden``), hit a limit, or crashed scores zero tests.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import secrets
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Callable, Iterator, Mapping, Protocol

from mmgrpo.registry import Registry
from tasks.sandbox_grading import MAX_ELEMENTS, Caller, CallOutcome, count_values, defined_names, run_test
from tasks.sandbox_plan import Guess, planned_calls

STATUSES = ("passed", "failed", "error", "forbidden", "timeout", "cpu_limit", "memory_limit", "output_limit",
            "no_verdict", "unavailable")
BACKEND_MODULES = {"bwrap": "tasks.sandbox_bwrap", "http": "tasks.sandbox_http", "process": "tasks.sandbox_process"}
DEFAULT_BACKEND = "bwrap"
MAX_EVENT_BYTES = 1 << 20
"""Longest event line (one call's answer) read; a longer one ends a local run as ``output_limit``."""
MAX_NOTE_BYTES = 8192
"""Longest event line other than an answer (``{"i": ...}``) read: a load report or a refusal is a few hundred
characters (each JSON-escaped); a longer one ends the run unparsed (``no_verdict``: a protocol error)."""
MAX_VIOLATIONS = 8
"""Refused operations kept per run: a program can print forged ones by the thousand. Past them the run is
``forbidden`` whatever follows, so its later event lines are counted, not read."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use, on every back end; each field is a task option (``task.options.sandbox``)."""

    wall_seconds: float = 10.0
    cpu_seconds: int = 5
    memory_mb: int = 512
    """Address space of the process (RLIMIT_AS): an allocation past it raises MemoryError. With ``disk_mb``, also the
    cap of a ``bwrap`` run's memory cgroup, where the host allows one (:mod:`tasks.sandbox_cgroup`)."""
    file_size_mb: int = 8
    """Largest file it may write, and the most it may print (stdout, stderr and its answers together)."""
    disk_mb: int = 16
    """Size of its private writable folder (``bwrap``: a tmpfs; its files live in it)."""
    files: int = 4096
    """Most files and folders in that folder, itself included (``bwrap`` started by root: the tmpfs's inode count)."""
    open_files: int = 64
    read_mb_per_second: int = 0
    """Disk reads (MB) per second a ``bwrap`` run may make where the host gives it an I/O cgroup (reads served from
    the page cache are free); 0, the default: not throttled. Opt-in, with its cost: a fifteenth red-team round's write
    into stdout from mapped pages queued behind the throttle held the pipe's lock, and the trainer's read of it, 93 s
    past the wall clock (:mod:`tasks.sandbox_cgroup`)."""
    read_ops_per_second: int = 0
    """Disk read operations per second, likewise (0: not throttled)."""
    processes: int = 32
    """RLIMIT_NPROC: processes and threads it may have (``bwrap`` runs the code as an unprivileged host user, so it
    binds; the seccomp filter forbids new processes there all the same: the other rlimits are per process)."""
    captured_bytes: int = 4096
    """How much of stdout/stderr comes back in the result."""
    answer_values: int = 200_000
    """Most values (containers included, as encoded) all of a run's answers together may hold: each is rebuilt in the
    trainer, its GIL held (up to ~0.2 s per 100,000). Past it the run ends, ``failed``, its later calls unanswered."""

    def __post_init__(self) -> None:
        for name in ("wall_seconds", "cpu_seconds", "memory_mb", "file_size_mb", "disk_mb", "files", "open_files",
                     "processes", "answer_values"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox {name} must be positive, got {getattr(self, name)}")
        for name in ("read_mb_per_second", "read_ops_per_second"):
            if getattr(self, name) < 0:
                raise ValueError(f"sandbox {name} must be 0 (not throttled) or positive, got {getattr(self, name)}")

    def child_limits(self) -> dict[str, int]:
        """The rlimits the child program sets on itself."""
        return {name: getattr(self, name) for name in ("cpu_seconds", "memory_mb", "file_size_mb", "open_files",
                                                       "processes")}


@dataclass(frozen=True)
class Evaluation:
    """One run of the code by a back end: how it ended and the events it reported (not yet trusted)."""

    status: str
    """``ok`` (it ran to its end, or was ended once every call was answered), ``timeout``, ``cpu_limit``, ``output_limit``, ``forbidden``, ``no_verdict``,
    ``unavailable`` (the service could not be reached)."""
    events: str = ""
    """The child's event lines (see :mod:`tasks.sandbox_child`), each starting with the run's tag, from a back end
    that returns them at the end (a local session reads them as they come: :class:`Events`)."""
    tag: str = ""
    error: str | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    truncated: bool = False
    """The back end returned only the first part of the output (a service's cap): answers past it are missing, not
    refused, and a later run may ask them again."""


class Session(Protocol):
    """One program, loaded once, answering calls one at a time until :meth:`close`."""

    events: Events
    """What it reported so far (``loaded`` is set once :meth:`Sandbox.start` returns)."""

    def expect(self, plan: Callable[[Guess], list[list]]) -> None:
        """``plan(guess)``: the calls the tests will probably make, in order, given the answers ``guess`` knows
        (:mod:`tasks.sandbox_plan`). A back end that takes a run's calls all at once asks them together (and may plan
        again as answers come); a live one answers each as it comes and never calls it (no run of the tests on stand-ins
        on the default back end's path)."""

    def call(self, call: list) -> CallOutcome | None:
        """The answer to ``[name, args, kwargs]`` (encoded), or None when the run ended before giving it."""

    def close(self) -> list[tuple[Evaluation, Events]]:
        """End the run: the runs of the program it took, how each ended and what each reported."""


class Sandbox(Protocol):
    """A back end: starts the child program on ``source`` under ``limits`` and asks it the tests' calls."""

    isolation: str
    """In words, what keeps the code from the host (shown in every result)."""
    unsafe: bool

    @classmethod
    def from_options(cls, **settings: Any) -> Sandbox:
        """The back end from its own task options; raises if it cannot run here, saying why."""

    def start(self, source: str, limits: SandboxLimits) -> Session:
        """A running program, its source executed (or its load error reported)."""


@dataclass(frozen=True)
class SandboxResult:
    """How one run ended: tests passed of total, and a status naming the outcome."""

    status: str
    passed: int
    total: int
    error: str | None = None
    """The first exception, refused operation or limit, in words."""
    violations: tuple[str, ...] = ()
    """Operations the ``process`` back end's audit hook refused (each ``kind: detail``): at most
    :data:`MAX_VIOLATIONS` (the count of later event lines, unread, in ``error``)."""
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    isolation: str = ""
    rounds: int = 0
    """Runs of the code it took: one with a local back end; one per new call with a service (each a replay)."""

    @property
    def fraction_passed(self) -> float:
        """Share of tests passed; zero for any run that broke a rule or a limit."""
        if self.status not in ("passed", "failed") or self.total == 0:
            return 0.0
        return self.passed / self.total

    def as_dict(self) -> dict:
        return asdict(self)


def job(source: str, calls: list[list], limits: SandboxLimits, *, guard: bool = False,
        silent: int = 0, seal: bytes = b"") -> tuple[bytes, str]:
    """The child program's stdin for one run, and the tag its event lines start with; the answers to the first
    ``silent`` calls are not written (:mod:`tasks.sandbox_replay`); ``seal``: a seccomp filter the child installs
    before the code runs (:func:`tasks.sandbox_seccomp.build_exec_seal`)."""
    tag = secrets.token_hex(8) + " "
    payload = {"source": source, "calls": calls, "silent": silent, "limits": limits.child_limits(), "guard": guard,
               "tag": tag, "seal": seal.hex()}
    return json.dumps(payload).encode() + b"\n", tag


@dataclass
class Events:
    """The child's event lines, read strictly: the first word on each call counts, later ones are ignored, and so
    is an answer to a call not yet asked (``expected``: how many have been). The answers may hold ``answer_values``
    values in all (``values``: so far); the one past it is not read (``beyond_budget``), and the run ends."""

    loaded: bool | None = None
    error: str | None = None
    outcomes: dict[int, CallOutcome] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    unread: int = 0
    flooded: int = 0
    stray: int = 0
    """Untagged lines on a local event channel, where an honest child writes tagged ones only (a protocol error: the
    run ends unparsed; a service's stdout mixes the code's prints with the events, so it is not counted there)."""
    parsed: int = 0
    expected: int = 0
    answer_values: int = SandboxLimits.answer_values
    values: int = 0
    beyond_budget: bool = False
    malformed: str | None = None
    """Why an event line was refused unparsed or unread (a protocol error: the run ends, ``no_verdict``): a line
    other than an answer past :data:`MAX_NOTE_BYTES`, a field that is not a string where the child writes one
    (``raised``, ``violation``, ``error``) or an answer with fields the child never writes. None: none was."""

    @classmethod
    def parse(cls, text: str, tag: str, n_calls: int, answer_values: int = SandboxLimits.answer_values,
              answered: int = 0) -> Events:
        """The events of a whole run's output (a service's stdout, prints and events mixed): its tagged lines are
        found by searches in C (7 MB of newlines split in Python cost ~1.7 s of the trainer's CPU, the GIL held), and
        the answers to the first ``answered`` calls, which earlier runs gave, are skipped unread."""
        events = cls(expected=n_calls, answer_values=answer_values)
        known = re.compile(re.escape(tag) + r'\{"i": (\d{1,9}),')
        for start, end in _tagged_lines(text, tag):
            skipped = known.match(text, start, end) if answered else None
            if skipped is None or int(skipped.group(1)) >= answered:
                events.take_line(text[start:end], tag)
        return events

    @staticmethod
    def prints(text: str, tag: str) -> str:
        """``text`` without its tagged lines, each with the newline the child writes before it (so that a print
        without one cannot glue itself to the tag): what the code printed."""
        kept, start = [], 0
        for line_start, line_end in _tagged_lines(text, tag):
            kept.append(text[start:max(line_start - 1, start)])
            start = line_end + 1
        return "".join(kept) + text[start:]

    def expect(self, n_calls: int) -> None:
        self.expected = n_calls

    def take_line(self, line: str, tag: str) -> None:
        """Parse one tagged line, unless it is a violation past :data:`MAX_VIOLATIONS` (``unread``) or past the most
        lines an honest child writes, :meth:`line_budget` (``flooded``: a protocol error, the run has no verdict)."""
        if not line.startswith(tag) or len(line) > MAX_EVENT_BYTES or self.beyond_budget or self.malformed:
            return
        if len(self.violations) >= MAX_VIOLATIONS:
            self.unread += 1
            return
        if self.parsed >= self.line_budget():
            self.flooded += 1
            return
        self.parsed += 1
        body = line[len(tag):]
        if len(body) > MAX_NOTE_BYTES and not body.startswith('{"i": '):
            self.malformed = f"an event line other than an answer longer than {MAX_NOTE_BYTES} bytes"
            return
        try:
            event = json.loads(body)
        except (ValueError, RecursionError):
            return
        if type(event) is dict:
            try:
                self._take(event)
            except Exception as error:  # noqa: BLE001 - a line the trainer cannot read ends the run, never the trainer
                self.malformed = f"an event line the trainer could not read ({type(error).__name__})"

    def line_budget(self) -> int:
        """The most event lines an honest child has written so far: its load report, one answer per call asked and
        :data:`MAX_VIOLATIONS` refusals."""
        return 1 + self.expected + MAX_VIOLATIONS

    def _take(self, event: dict) -> None:
        """Only strings are read where the child writes strings (``str()`` of a deeply nested list costs seconds of
        the trainer's CPU); anything else ends the run (``malformed``)."""
        if "violation" in event:
            if type(event["violation"]) is not str:
                self.malformed = "a refusal that is not a string"
                return
            self.violations.append(event["violation"][:300])
        elif self.loaded is None and ("loaded" in event or "error" in event):
            if "loaded" not in event and type(event["error"]) is not str:
                self.malformed = "a load error that is not a string"
                return
            self.loaded = "loaded" in event
            self.error = None if self.loaded else event["error"][:300]
        elif type(event.get("i")) is int and 0 <= event["i"] < self.expected and event["i"] not in self.outcomes:
            if len(event) != 2 or not ("value" in event or "raised" in event):
                self.malformed = "an answer with fields the sandbox never writes"
                return
            if "raised" in event:
                raised = event["raised"]
                if not (type(raised) is list and len(raised) == 2 and all(type(part) is str for part in raised)):
                    self.malformed = "an exception that is not a pair of strings"
                    return
                self.outcomes[event["i"]] = CallOutcome(raised=(raised[0][:100], raised[1][:300]))
                return
            values = count_values(event.get("value"), min(MAX_ELEMENTS, self.answer_values - self.values))
            self.values += values
            if self.values > self.answer_values:
                self.beyond_budget = True
            else:
                self.outcomes[event["i"]] = _answer(event.get("value"), values)


def _tagged_lines(text: str, tag: str) -> Iterator[tuple[int, int]]:
    """Where each line of ``text`` that starts with ``tag`` starts and ends (its newline excluded)."""
    at = text.find(tag)
    while at != -1:
        end = text.find("\n", at)
        end = len(text) if end == -1 else end
        if at == 0 or text[at - 1] == "\n":
            yield at, end
        at = text.find(tag, end)


def _answer(encoded: object, values: int) -> CallOutcome:
    try:
        return CallOutcome.answer(encoded, values)
    except (ValueError, RecursionError) as error:
        return CallOutcome(raised=("TypeError", f"the sandbox answered an unreadable value: {error}"))


def run_tests(source: str, tests: list[str], sandbox: Sandbox, limits: SandboxLimits = SandboxLimits(),
              entry_points: frozenset[str] = frozenset()) -> SandboxResult:
    """Execute ``source`` in ``sandbox`` and grade each test (a Python statement, e.g. ``assert f(2) == 4``).

    ``entry_points``: the functions under test, as the task names them; only these may shadow a builtin.
    """
    names = defined_names(source)
    session = sandbox.start(source, limits)
    session.expect(lambda guess: planned_calls(tests, names, entry_points, guess=guess))
    try:
        caller = Caller(session.call)
        outcomes = [run_test(index, test, caller, names, entry_points) for index, test in enumerate(tests)]
    finally:
        runs = session.close()
    return _result(runs, outcomes, len(tests), sandbox.isolation)


def _result(runs: list[tuple[Evaluation, Events]], outcomes: list, total: int, isolation: str) -> SandboxResult:
    """Classify the finished runs: the first one that did not end well names the status."""
    evaluation, events = next(((e, v) for e, v in runs if e.status != "ok" or v.violations or not v.loaded),
                              runs[-1])
    passed = sum(outcome.passed for outcome in outcomes)
    first_error = next((outcome.error for outcome in outcomes if not outcome.passed), None)
    raised = [outcome.raised[0] for _, v in runs for outcome in v.outcomes.values() if outcome.raised]
    common = {"total": total, "seconds": sum(e.seconds for e, _ in runs), "isolation": isolation,
              "stdout": evaluation.stdout, "stderr": evaluation.stderr, "rounds": len(runs)}
    violations = [v for _, events_ in runs for v in events_.violations]
    if violations:
        unread = sum(events_.unread for _, events_ in runs)
        error = f"refused {violations[0]}" + (f" ({unread} later event lines unread)" if unread else "")
        return SandboxResult("forbidden", 0, error=error, violations=tuple(violations[:MAX_VIOLATIONS]), **common)
    malformed = next((events_.malformed for _, events_ in runs if events_.malformed), None)
    if malformed:
        return SandboxResult("no_verdict", 0, error=f"{malformed} on the event channel (a protocol error)", **common)
    flooded = sum(events_.flooded for _, events_ in runs)
    if flooded:
        return SandboxResult("no_verdict", 0, error=f"{flooded} event lines past the calls asked (a protocol error)",
                             **common)
    if any(events_.stray for _, events_ in runs):
        return SandboxResult("no_verdict", 0, error="an untagged line on the event channel (a protocol error)",
                             **common)
    if any(events_.beyond_budget for _, events_ in runs):
        budget = runs[-1][1].answer_values
        return SandboxResult("failed", passed, error=f"its answers held more than {budget} values in all (the sandbox "
                             "limit answer_values): the run was ended", **common)
    if evaluation.status != "ok":
        return SandboxResult(evaluation.status, passed, error=evaluation.error, **common)
    error = events.error or ""
    if "MemoryError" in error or "MemoryError" in raised:
        return SandboxResult("memory_limit", passed, error=error or "MemoryError in a call", **common)
    if "File too large" in error:
        return SandboxResult("output_limit", passed, error=error, **common)
    if events.loaded is None:
        return SandboxResult("no_verdict", 0, error="the process ended without reporting", **common)
    if not events.loaded:
        return SandboxResult("error", 0, error=events.error, **common)
    return SandboxResult("passed" if passed == total else "failed", passed, error=first_error, **common)


def make_sandbox(options: Mapping[str, Any] | None = None) -> tuple[Sandbox, SandboxLimits]:
    """The back end and limits ``task.options.sandbox`` names: ``{backend: bwrap, wall_seconds: 5, ...}``.

    Limit fields go to :class:`SandboxLimits`, the rest to the back end's own settings.
    """
    options = dict(options or {})
    name = str(options.pop("backend", DEFAULT_BACKEND))
    backend = get_backend(name)
    limit_names = {item.name for item in fields(SandboxLimits)}
    limits = SandboxLimits(**{key: value for key, value in options.items() if key in limit_names})
    sandbox = backend.from_options(**{key: value for key, value in options.items() if key not in limit_names})
    if sandbox.unsafe:
        log.warning("UNSAFE sandbox: %s. Model-written code runs with access to this machine.", sandbox.isolation)
    return sandbox, limits


BACKENDS: Registry[type] = Registry("sandbox back end")


def get_backend(name: str) -> type:
    """The back-end class registered as ``name`` (its module is imported on first use)."""
    if name in BACKEND_MODULES and name not in BACKENDS.names():
        importlib.import_module(BACKEND_MODULES[name])
    return BACKENDS.get(name)
