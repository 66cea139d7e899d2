"""One local sandbox process as a session: job in on stdin, one call at a time, capped output, killed at the end.

Shared by the ``bwrap`` and ``process`` back ends. The process runs the child program
(:mod:`tasks.sandbox_child`) for the whole grading of one program: each call goes in as a line
on its stdin and this side waits for its answer on the event channel (a channel it cannot swap for
anything else: a file could be replaced by a FIFO and hang the reader) before the next is asked.
Its stdin, stdout, stderr and event channel are Unix stream socket pairs, not pipes: a pipe's
writer holds the pipe's lock while it copies from its own memory, page faults included, and the
reader waits on that lock, uninterruptibly (round 16: one ``writev`` of a thousand pieces from cold
pages of host libraries held the trainer's read 14 s past the wall clock); a socket's writer copies
before it queues, and this side's reads and writes never wait on the other end's.
stdout and stderr keep only their last ``captured_bytes``; one event line longer than
:data:`MAX_EVENT_BYTES`, or more than ``file_size_mb`` of output in all, ends the run
(``output_limit``); more event lines than an honest child writes (its load report, an answer per call asked, a few
refusals), or one line without the run's tag, end it unparsed (``no_verdict``: a protocol error). The wall clock
counts from the start to the last answer, and the process group is killed once the grading is over or at the wall
clock, whichever comes first; then the kernel is prompted to free what the run left in flight over Unix sockets
(:mod:`tasks.unix_gc`).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import time
from typing import Callable, Mapping, Sequence

from tasks.sandbox import MAX_EVENT_BYTES, Evaluation, Events
from tasks.sandbox_cgroup import RunCgroup
from tasks.sandbox_grading import CallOutcome
from tasks.sandbox_plan import Guess
from tasks.unix_gc import collect_unix_garbage

_EXIT_SECONDS = 1.0
"""Once every call is answered and its stdin closed, how long it has to end on its own."""
_DRAIN_SECONDS = 1.0
"""After the kill, how long the pipes are read for what was written before it."""
_REAP_SECONDS = 0.5
"""After its children are killed, how long the process has to reap them and end."""
_TRICKLE_BYTES, _TRICKLE_SECONDS = 4096, 0.002
"""A read shorter than this that completes no tagged event line is followed by this pause, so that output written a
byte at a time wakes this side at most a few hundred times a second (each wake-up costs CPU with the GIL held)..."""
_CHILD_SEND_BUFFER = 16384
"""The child's send buffer on its output channels (the kernel doubles it): each send is its own buffer in a Unix
socket, so a flood of one-byte sends (a seventeenth round: 150,000 a second) costs this side the kernel's work on each
it reads; a small buffer makes the sender wait for the reads instead, and large writes still go through at once."""
_SO_PASSRIGHTS = 83  # linux/socket.h, Linux 6.16: 0 = the socket refuses file descriptors sent to it
_FREE_SHORT_READS = 8
"""...except this many such reads per call asked (and before the load report): an honest program's own prints around
each answer (a line on stderr, a flushed one on stdout) cost no pause, so a chatty one is not slowed by a few ms a
call; a trickle gets as few free wake-ups per call as the tests' own work per call already costs."""


class LocalSession:
    """A started child program answering calls over its pipes (``{events_fd}`` in ``command`` is the channel)."""

    def __init__(self, command: Sequence[str], job: bytes, tag: str, *, wall_seconds: float, output_bytes: int,
                 captured_bytes: int, answer_values: int, env: Mapping[str, str], cwd: str | None = None,
                 pass_fds: Sequence[int] = (), cgroup: RunCgroup | None = None) -> None:
        """``cgroup``: the run's memory cgroup, which its processes joined (removed here once they are gone)."""
        self.tag, self.output_bytes, self.captured_bytes = tag, output_bytes, captured_bytes
        self.cgroup, self.out_of_memory = cgroup, False
        self.events, self.asked = Events(answer_values=answer_values), 0
        self.free_reads = _FREE_SHORT_READS
        self.total, self.exceeded, self.timed_out, self.killed_by_us = 0, None, False, False
        (self.stdin, stdin), (self.stdout, stdout), (self.stderr, stderr), (self.events_out, events) = (
            _one_way_pair(ours_write) for ours_write in (True, False, False, False))
        command = [part.replace("{events_fd}", str(events.fileno())) for part in command]
        self.started = time.monotonic()
        self.deadline = self.started + wall_seconds
        try:
            self.process = subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=stderr,
                                            pass_fds=(events.fileno(), *pass_fds), env=dict(env), cwd=cwd,
                                            start_new_session=True)
        finally:
            for theirs in (stdin, stdout, stderr, events):
                theirs.close()
        self.events_fd, self.stdin_fd = self.events_out.fileno(), self.stdin.fileno()
        self.out_fd, self.err_fd = self.stdout.fileno(), self.stderr.fileno()
        self.buffers = {self.out_fd: bytearray(), self.err_fd: bytearray(), self.events_fd: bytearray()}
        self.pending, self.reading = bytearray(job), set(self.buffers)
        self.selector = selectors.DefaultSelector()
        for fd in self.buffers:
            self.selector.register(fd, selectors.EVENT_READ)
        self._pump(lambda: self.events.loaded is not None)

    @property
    def over(self) -> bool:
        """Whether the run has ended: a limit (its answers' budget too), a refused operation (it is ``forbidden``
        whatever follows), its exit (all pipes closed) or the close."""
        return (bool(self.exceeded) or self.timed_out or self.killed_by_us or bool(self.events.violations)
                or bool(self.events.flooded) or bool(self.events.stray) or self.events.beyond_budget
                or bool(self.events.malformed)
                or not self.reading)

    def expect(self, plan: Callable[[Guess], list[list]]) -> None:
        """A live session answers each call as it comes: no plan needed (``plan`` is not called)."""

    def call(self, call: list) -> CallOutcome | None:
        """Ask one encoded call ``[name, args, kwargs]`` and wait for its answer (None: the run ended first)."""
        if self.over or not self.events.loaded:
            return None
        index, self.asked = self.asked, self.asked + 1
        self.pending += json.dumps(call).encode() + b"\n"
        self.events.expect(self.asked)
        self.free_reads = _FREE_SHORT_READS
        self._pump(lambda: index in self.events.outcomes)
        return self.events.outcomes.get(index)

    def _pump(self, done: Callable[[], bool]) -> None:
        """Feed stdin and read every pipe until ``done()``, the run ends or the wall clock runs out."""
        while not done() and not self.over:
            if self.pending and self.stdin_fd not in self.selector.get_map():
                self.selector.register(self.stdin_fd, selectors.EVENT_WRITE)
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                self.timed_out = True
                return
            for key, _ in self.selector.select(timeout=remaining):
                if key.fd == self.stdin_fd:
                    self._write()
                else:
                    self._read(key.fd)

    def _write(self) -> None:
        try:
            written = self.stdin.send(self.pending, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
        except BlockingIOError:
            return
        except OSError:  # it closed stdin or exited: its answers, if any, say the rest
            written = len(self.pending)
        del self.pending[:written]
        if not self.pending:
            self.selector.unregister(self.stdin_fd)

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        except ConnectionResetError:  # it closed its end with unread data in it: an end like any other
            chunk = b""
        if not chunk:
            self.selector.unregister(fd)
            self.reading.discard(fd)
            return
        self.total += len(chunk)
        buffer = self.buffers[fd]
        parsed = self.events.parsed
        if fd == self.events_fd:
            self._take_events(buffer, chunk)
        if len(chunk) < _TRICKLE_BYTES and self.events.parsed == parsed:
            if self.free_reads:
                self.free_reads -= 1
            else:
                time.sleep(_TRICKLE_SECONDS)
        if fd != self.events_fd:
            buffer += chunk
            if len(buffer) > self.captured_bytes:
                del buffer[:len(buffer) - self.captured_bytes]
        if self.total > self.output_bytes:
            self.exceeded = f"printed more than {self.output_bytes >> 20} MB"

    def _take_events(self, pending: bytearray, chunk: bytes) -> None:
        """Add ``chunk`` to the unfinished line ``pending`` and take the lines it completes: only the new chunk is
        searched for a newline, so a line written a byte at a time costs its length, not its length squared. A line
        without the run's tag, or past the events' budget, ends the run unparsed."""
        end = chunk.rfind(b"\n")
        if end < 0:
            pending += chunk
        else:
            pending += chunk[:end]
            lines = pending.split(b"\n")
            pending[:] = chunk[end + 1:]
            for line in lines:
                if self.events.flooded or self.events.stray or self.events.malformed:
                    break
                if len(line) > MAX_EVENT_BYTES:  # completed in this chunk: the check on ``pending`` below misses it
                    self.exceeded = f"an answer line longer than {MAX_EVENT_BYTES >> 20} MB"
                    return
                text = line.decode("utf-8", errors="replace")
                if text.startswith(self.tag):
                    self.events.take_line(text, self.tag)
                else:
                    self.events.stray += 1
        if len(pending) > MAX_EVENT_BYTES:
            self.exceeded = f"an answer line longer than {MAX_EVENT_BYTES >> 20} MB"

    def close(self) -> list[tuple[Evaluation, Events]]:
        """End the run (killing what is left of it, whatever happens on the way): how it ended and what it reported."""
        try:
            if not self.over:  # stdin closed, it ends on its own (flushing its prints), or it is ended here
                if self.stdin_fd in self.selector.get_map():
                    self.selector.unregister(self.stdin_fd)
                self.pending.clear()
                self.stdin.close()
                self.deadline = min(self.deadline, time.monotonic() + _EXIT_SECONDS)
                self._pump(lambda: False)
                self.killed_by_us, self.timed_out = self.timed_out, False
        finally:
            self._end()
        return [(self._evaluation(time.monotonic() - self.started), self.events)]

    def _end(self) -> None:
        """Kill the run, remove its cgroup, read what it wrote before the kill, and close every channel."""
        try:
            if self.cgroup is not None:
                self.cgroup.lift_io()
            _kill_group(self.process)
            if self.cgroup is not None:
                self.out_of_memory = self.cgroup.remove()
            collect_unix_garbage()
            drain_until = time.monotonic() + _DRAIN_SECONDS
            while self.reading and not self.exceeded and time.monotonic() < drain_until:
                for key, _ in self.selector.select(timeout=max(0.0, drain_until - time.monotonic())):
                    if key.fd != self.stdin_fd:
                        self._read(key.fd)
                    else:
                        self.selector.unregister(key.fd)
        finally:
            self.selector.close()
            for channel in (self.stdin, self.stdout, self.stderr, self.events_out):
                channel.close()

    def _evaluation(self, seconds: float) -> Evaluation:
        """Name how the run ended (a signal shows as ``-N``, or ``128 + N`` through bubblewrap)."""
        text = {fd: bytes(buffer).decode("utf-8", errors="replace") for fd, buffer in self.buffers.items()}
        common = {"tag": self.tag, "stdout": text[self.out_fd], "stderr": text[self.err_fd], "seconds": seconds}
        if self.exceeded:
            return Evaluation("output_limit", error=self.exceeded, **common)
        if self.timed_out:
            return Evaluation("timeout", error="wall-clock limit reached", **common)
        if self.killed_by_us:
            return Evaluation("ok", **common)
        if self.out_of_memory:
            return Evaluation("memory_limit", error="the run's memory cgroup limit was reached", **common)
        returncode = self.process.returncode
        signalled = returncode - 128 if returncode > 128 else -returncode
        if signalled == signal.SIGSYS:
            return Evaluation("forbidden", error="a forbidden system call (seccomp)", **common)
        if signalled in (signal.SIGXCPU, signal.SIGKILL):
            return Evaluation("cpu_limit", error="CPU time limit reached", **common)
        return Evaluation("ok", **common)


def _one_way_pair(ours_write: bool) -> tuple[socket.socket, socket.socket]:
    """(our end, the child's end) of a Unix stream socket pair carrying data one way only: to the child when
    ``ours_write``, else from it (the other direction shut down, so neither side can fill it). Our end takes no
    file descriptors where the kernel can refuse them (the child's seccomp filter refuses sending any); the
    child's send buffer is :data:`_CHILD_SEND_BUFFER` (it cannot change it: refused too)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.shutdown(socket.SHUT_RD if ours_write else socket.SHUT_WR)
    ours.setblocking(False)
    try:
        ours.setsockopt(socket.SOL_SOCKET, _SO_PASSRIGHTS, 0)
    except OSError:  # a kernel before 6.16
        pass
    if not ours_write:
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _CHILD_SEND_BUFFER)
    return ours, theirs


def _children(pid: int) -> list[int]:
    """Process descriptors on the children of ``pid``, each checked to be its child after it was opened (so a
    recycled process id is never signalled)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            candidates = [int(child) for child in listing.read().split()]
    except OSError:
        return []
    found = []
    for child in candidates:
        try:
            descriptor = os.pidfd_open(child)
        except OSError:
            continue
        try:
            with open(f"/proc/{child}/stat") as status:
                parent = int(status.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            parent = -1
        if parent == pid:
            found.append(descriptor)
        else:
            os.close(descriptor)
    return found


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the process's children first (bubblewrap's init, PID 1 of the sandbox) so that the process reaps them
    before it ends: killed together, an orphaned init would be left unreaped to a trainer that is PID 1 of its
    container or a subreaper. Then kill the process and everything in its group, and reap it."""
    children = _children(process.pid)
    for descriptor in children:
        try:
            signal.pidfd_send_signal(descriptor, signal.SIGKILL)
        except OSError:
            pass
        os.close(descriptor)
    if children:
        try:
            process.wait(timeout=_REAP_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
