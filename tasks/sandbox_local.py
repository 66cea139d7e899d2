"""Start one local sandbox process and watch it: job in on stdin, capped pipes out, killed at the deadline.

Shared by the ``bwrap`` and ``process`` back ends. Everything the process writes reaches this
side through pipes it cannot swap for anything else (a file could be replaced by a FIFO and
hang the reader): stdout and stderr keep only their last ``captured_bytes``, the event channel
is read in full up to ``file_size_mb``, and output past ``file_size_mb`` in all kills the run.
The process group is killed at the wall clock and in every case once the run is over.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from tasks.sandbox import Evaluation


@dataclass(frozen=True)
class ProcessRun:
    """How a process ended and what it wrote."""

    returncode: int
    timed_out: bool
    output_exceeded: bool
    events: str
    stdout: str
    stderr: str
    seconds: float


def _feed(stdin, data: bytes) -> None:
    try:
        stdin.write(data)
        stdin.close()
    except (BrokenPipeError, OSError):  # it exited or closed stdin before reading its job
        pass


def run_process(command: Sequence[str], job: bytes, *, wall_seconds: float, output_bytes: int, captured_bytes: int,
                env: Mapping[str, str], cwd: str | None = None, pass_fds: Sequence[int] = ()) -> ProcessRun:
    """Run ``command`` with ``job`` on stdin; the event channel is the file descriptor in ``{events_fd}``."""
    events_read, events_write = os.pipe()
    command = [part.replace("{events_fd}", str(events_write)) for part in command]
    started = time.monotonic()
    try:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   pass_fds=(events_write, *pass_fds), env=dict(env), cwd=cwd,
                                   start_new_session=True)
    finally:
        os.close(events_write)
    feeder = threading.Thread(target=_feed, args=(process.stdin, job), daemon=True)
    feeder.start()
    out_fd, err_fd = process.stdout.fileno(), process.stderr.fileno()
    buffers = {out_fd: bytearray(), err_fd: bytearray(), events_read: bytearray()}
    total, deadline, exceeded = 0, started + wall_seconds, False
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map() and not exceeded and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                total += len(chunk)
                buffer = buffers[key.fd]
                buffer += chunk
                if key.fd != events_read and len(buffer) > captured_bytes:
                    del buffer[:len(buffer) - captured_bytes]
                exceeded = total > output_bytes
    try:
        process.wait(timeout=max(0.0, deadline - time.monotonic()) if not exceeded else 0)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = not exceeded
    _kill_group(process)
    seconds = time.monotonic() - started
    os.close(events_read)
    process.stdout.close()
    process.stderr.close()
    feeder.join(timeout=1)
    text = {fd: bytes(buffer).decode("utf-8", errors="replace") for fd, buffer in buffers.items()}
    return ProcessRun(process.returncode, timed_out, exceeded, text[events_read], text[out_fd], text[err_fd], seconds)


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the process and everything in its group, then reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def evaluation(run: ProcessRun, tag: str, output_mb: int) -> Evaluation:
    """Name how a local run ended (a signal shows as ``-N``, or ``128 + N`` through bubblewrap)."""
    common = {"events": run.events, "tag": tag, "stdout": run.stdout, "stderr": run.stderr, "seconds": run.seconds}
    if run.output_exceeded:
        return Evaluation("output_limit", error=f"printed more than {output_mb} MB", **common)
    if run.timed_out:
        return Evaluation("timeout", error="wall-clock limit reached", **common)
    signalled = run.returncode - 128 if run.returncode > 128 else -run.returncode
    if signalled == signal.SIGSYS:
        return Evaluation("forbidden", error="a forbidden system call (seccomp)", **common)
    if signalled in (signal.SIGXCPU, signal.SIGKILL):
        return Evaluation("cpu_limit", error="CPU time limit reached", **common)
    return Evaluation("ok", **common)
