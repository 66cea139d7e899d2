"""Run untrusted Python (a model's completion) against unit tests in a separate, limited process.

One process per run (:func:`run_tests`), started by ``python -I -S -B`` (no site packages, no
user paths, no environment beyond ``PATH``, ``HOME`` = its own directory) in a fresh temporary
working directory that is deleted afterwards. Limits:

- wall clock (``wall_seconds``): the whole process group is killed at the deadline;
- CPU time, address space, file size, open files, processes (rlimits, set by the child
  before any untrusted code runs);
- stdout and stderr go to files in the working directory, so the file-size limit also caps
  printed output, and at most ``captured_bytes`` of each is read back;
- network: a fresh network namespace (``unshare -n``; ``unshare -rn`` for a non-root user)
  where the system allows one, and in every case an audit hook in the child that refuses
  sockets, process creation, ``ctypes``, and file access outside the working directory
  (reads of the standard library excepted) — see :mod:`tasks.sandbox_child`.

The audit hook is a guard against a policy model's accidents and reward hacking, not a
security boundary against a determined attacker (Python code can reach the hook's state
through the interpreter); run hostile code only inside a container or VM.

Every run ends in a :class:`SandboxResult` with a ``status`` naming what happened; a run that
broke a rule (``forbidden``), hit a limit, or crashed scores zero tests.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CHILD_PROGRAM = Path(__file__).with_name("sandbox_child.py")

STATUSES = ("passed", "failed", "error", "forbidden", "timeout", "cpu_limit", "memory_limit", "output_limit",
            "no_verdict")


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use; every field is a task option (``task.options.sandbox``)."""

    wall_seconds: float = 10.0
    cpu_seconds: int = 5
    memory_mb: int = 512
    """Address space of the process (RLIMIT_AS): an allocation past it raises MemoryError."""
    file_size_mb: int = 8
    """Largest file it may write, stdout and stderr included."""
    open_files: int = 64
    processes: int = 64
    """RLIMIT_NPROC (not enforced for root; the audit hook refuses process creation anyway)."""
    captured_bytes: int = 4096
    """How much of stdout/stderr comes back in the result."""
    network_namespace: bool = True
    """Start the process in a new network namespace when the system allows it."""
    temp_root: str | None = None
    """Where working directories are made (default: the system temporary directory)."""

    def __post_init__(self) -> None:
        for name in ("wall_seconds", "cpu_seconds", "memory_mb", "file_size_mb", "open_files", "processes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox {name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True)
class SandboxResult:
    """How one run ended: tests passed of total, and a status naming the outcome."""

    status: str
    passed: int
    total: int
    error: str | None = None
    """The first exception, refused operation or limit, in words."""
    violations: tuple[str, ...] = ()
    """Operations the audit hook refused (each ``kind: detail``)."""
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    isolation: str = "audit hook"
    """``network namespace + audit hook`` or ``audit hook`` (where no namespace could be made)."""

    @property
    def fraction_passed(self) -> float:
        """Share of tests passed; zero for any run that broke a rule or a limit."""
        if self.status not in ("passed", "failed") or self.total == 0:
            return 0.0
        return self.passed / self.total

    def as_dict(self) -> dict:
        return asdict(self)


@functools.cache
def network_namespace_prefix() -> tuple[str, ...]:
    """The command prefix that starts a process without network, or () where none works here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    for prefix in ((unshare, "-n", "--"), (unshare, "-rn", "--")):
        try:
            probe = subprocess.run([*prefix, sys.executable, "-I", "-S", "-c", "pass"], capture_output=True,
                                   timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return prefix
    return ()


def run_tests(source: str, tests: list[str], limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Execute ``source`` then each test (Python statements, e.g. ``assert f(2) == 4``) in a sandbox."""
    nonce = secrets.token_hex(16)
    prefix = network_namespace_prefix() if limits.network_namespace else ()
    isolation = "network namespace + audit hook" if prefix else "audit hook"
    work_dir = Path(tempfile.mkdtemp(prefix="mmgrpo-sandbox-", dir=limits.temp_root))
    job = {"nonce": nonce, "source": source, "tests": tests,
           "limits": {k: v for k, v in asdict(limits).items() if k not in ("temp_root", "network_namespace")}}
    try:
        verdict_path = work_dir.parent / f"{work_dir.name}.verdict"
        with open(work_dir / "stdout", "wb") as stdout, open(work_dir / "stderr", "wb") as stderr, \
                open(verdict_path, "wb") as verdict:
            started = time.monotonic()
            process = subprocess.Popen(
                [*prefix, sys.executable, "-I", "-S", "-B", str(CHILD_PROGRAM), str(verdict.fileno())],
                stdin=subprocess.PIPE, stdout=stdout, stderr=stderr, cwd=work_dir, pass_fds=(verdict.fileno(),),
                env={"PATH": os.defpath, "HOME": str(work_dir), "LANG": "C.UTF-8"}, start_new_session=True,
            )
            timed_out = _wait(process, json.dumps(job).encode(), limits.wall_seconds)
            seconds = time.monotonic() - started
        verdict_text = _tail(verdict_path, 1 << 20)
        verdict_path.unlink(missing_ok=True)
        return _result(
            verdict=_last_verdict(verdict_text, nonce), returncode=process.returncode, timed_out=timed_out,
            total=len(tests), seconds=seconds, isolation=isolation,
            stdout=_tail(work_dir / "stdout", limits.captured_bytes),
            stderr=_tail(work_dir / "stderr", limits.captured_bytes),
        )
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def _wait(process: subprocess.Popen, job: bytes, wall_seconds: float) -> bool:
    """Send the job, wait up to ``wall_seconds``; kill the process group on time-out. True if it timed out."""
    try:
        process.communicate(job, timeout=wall_seconds)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    except BrokenPipeError:  # it died before reading its job
        process.wait()
        timed_out = False
    try:  # also whatever it started, on time-out or not
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    return timed_out


def _tail(path: Path, limit: int) -> str:
    """The last ``limit`` bytes of ``path`` as text ('' if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - limit))
            return handle.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _last_verdict(text: str, nonce: str) -> dict | None:
    """The last well-formed verdict line carrying ``nonce`` (lines without it are the code's own)."""
    for line in reversed(text.splitlines()):
        if line.startswith(nonce + " "):
            try:
                return json.loads(line[len(nonce) + 1:])
            except json.JSONDecodeError:
                continue
    return None


def _result(*, verdict: dict | None, returncode: int, timed_out: bool, total: int, seconds: float,
            isolation: str, stdout: str, stderr: str) -> SandboxResult:
    """Classify one finished run."""
    common = {"total": total, "seconds": seconds, "isolation": isolation, "stdout": stdout, "stderr": stderr}
    violations = tuple(verdict.get("violations", ())) if verdict else ()
    error = verdict.get("error") if verdict else None
    passed = int(verdict.get("passed", 0)) if verdict else 0
    if violations:
        return SandboxResult("forbidden", 0, error=f"refused {violations[0]}", violations=violations, **common)
    if timed_out:
        return SandboxResult("timeout", passed, error="wall-clock limit reached", **common)
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return SandboxResult("cpu_limit", passed, error="CPU time limit reached", **common)
    if error and "MemoryError" in error:
        return SandboxResult("memory_limit", passed, error=error, **common)
    if error and "File too large" in error:
        return SandboxResult("output_limit", passed, error=error, **common)
    if verdict is None:
        reason = f"the process ended (exit status {returncode}) without reporting"
        return SandboxResult("no_verdict", 0, error=reason, **common)
    if error and not error.startswith("test "):  # the code itself did not run to its end
        return SandboxResult("error", 0, error=error, **common)
    return SandboxResult("passed" if passed == total else "failed", passed, error=error, **common)
