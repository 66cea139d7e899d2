"""The ``process`` sandbox back end: UNSAFE, opt-in only (``task.options.sandbox.backend: process``).

A plain ``python -I -S -B`` child in a throwaway folder, with the child program's rlimits and
audit hook (:mod:`tasks.sandbox_child`), and a network namespace (``unshare -n``/``-rn``) where
the system allows one. The audit hook catches a policy's accidents (opening files outside its
folder, sockets, subprocesses), not an attacker: Python code can reach the interpreter's state,
and the process runs as the trainer's user on the trainer's file system. For machines where
bubblewrap cannot run and the code is known to be harmless; the log and every result say so.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tasks.sandbox import BACKENDS, Evaluation, Events, SandboxLimits, job
from tasks.sandbox_local import LocalSession

CHILD_PROGRAM = Path(__file__).with_name("sandbox_child.py")


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


@BACKENDS.register("process")
class ProcessSandbox:
    """A limited child process guarded by an audit hook: no isolation from the host. Unsafe."""

    unsafe = True

    def __init__(self, network_namespace: bool = True, temp_root: str | None = None) -> None:
        """``network_namespace``: start it without network where the system allows; ``temp_root``: where its
        folders are made (default: the system temporary directory)."""
        self.prefix = network_namespace_prefix() if network_namespace else ()
        self.temp_root = temp_root
        guards = "rlimits + audit hook" + (" + network namespace" if self.prefix else "")
        self.isolation = f"process (UNSAFE: {guards}, no isolation from the host)"

    @classmethod
    def from_options(cls, **settings) -> ProcessSandbox:
        return cls(**settings)

    def start(self, source: str, limits: SandboxLimits) -> LocalSession:
        payload, tag = job(source, [], limits, guard=True)
        work_dir = tempfile.mkdtemp(prefix="mmgrpo-sandbox-", dir=self.temp_root)
        try:
            session = LocalSession([*self.prefix, sys.executable, "-I", "-S", "-B", str(CHILD_PROGRAM), "{events_fd}"],
                                   payload, tag, wall_seconds=limits.wall_seconds,
                                   output_bytes=limits.file_size_mb << 20, captured_bytes=limits.captured_bytes,
                                   answer_values=limits.answer_values, cwd=work_dir,
                                   env={"PATH": os.defpath, "HOME": work_dir, "TMPDIR": work_dir, "LANG": "C.UTF-8"})
        except BaseException:
            shutil.rmtree(work_dir, ignore_errors=True)
            raise
        return _RemovingSession(session, work_dir)


class _RemovingSession:
    """A local session whose working folder is removed when it closes."""

    def __init__(self, session: LocalSession, work_dir: str) -> None:
        self.session, self.work_dir = session, work_dir
        self.events = session.events
        self.call, self.expect = session.call, session.expect

    def close(self) -> list[tuple[Evaluation, Events]]:
        try:
            return self.session.close()
        finally:
            shutil.rmtree(self.work_dir, ignore_errors=True)
