"""The ``bwrap`` sandbox back end (the default on Linux): the code runs in bubblewrap's namespaces.

Each run is a fresh ``bwrap`` process (Debian/Ubuntu package ``bubblewrap``) that starts the
child program (:mod:`tasks.sandbox_child`) with:

- new user, mount, PID, network, IPC, UTS and cgroup namespaces: no other process is visible or
  reachable (the trainer included), the network is an empty loopback of its own;
- a root that is read-only and holds only ``/usr``, the ``/lib*`` folders, the interpreter's
  installation and the child program; no ``/proc``, no ``/sys``, a ``/dev`` of its own (a tmpfs) with the
  host's null, zero, full, random and urandom nodes bound in and nothing else: no ``/dev/ptmx`` nor
  ``devpts`` (each pty counts in the host-wide ``kernel.pty.nr``), no ``/dev/tty``;
- one writable place, ``/tmp`` (also its working directory and ``HOME``): a private tmpfs of
  ``disk_mb`` and, when the trainer is root, at most ``files`` files and folders, also bound at
  ``/dev/shm`` for POSIX semaphores (:mod:`tasks.sandbox_user`; for another trainer, a 1 MiB tmpfs
  there); it exists only in its mount namespace and is gone with its last process; ``/dev`` is read-only;
- no capabilities, a new session (no terminal to inject into), ``--die-with-parent``, the code as the
  namespace's PID 1 (``--as-pid-1``: no init of bubblewrap's own, whose orphan a trainer that is PID 1 of a
  container would never reap), and the seccomp filter of :mod:`tasks.sandbox_seccomp`;
- an unprivileged host user (:mod:`tasks.sandbox_user`: ``nobody`` when the trainer is root), so
  ``RLIMIT_NPROC`` holds its threads to ``processes`` and it owns none of the host files it sees;
- where the host allows it, cgroups of its own (:mod:`tasks.sandbox_cgroup`) capping its memory, tmpfs,
  page tables and kernel buffers together at ``memory_mb`` + ``disk_mb``, and its disk reads at
  ``read_mb_per_second`` and ``read_ops_per_second``;
- the child's rlimits (CPU, memory, file size, open files, threads; per process, so the seccomp
  filter forbids creating processes: threads only) and this side's wall clock and output cap
  (:mod:`tasks.sandbox_local`): killing the code, then ``bwrap``, ends its PID namespace, so nothing outlives the
  run.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

from tasks import sandbox_cgroup, sandbox_seccomp, sandbox_user
from tasks.sandbox import BACKENDS, SandboxLimits, job
from tasks.sandbox_cgroup import RunCgroup
from tasks.sandbox_local import LocalSession
from tasks.sandbox_user import Launch

CHILD_PROGRAM = Path(__file__).with_name("sandbox_child.py")
CHILD_INSIDE = "/opt/mmgrpo/sandbox_child.py"
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), "
                "or opt into the unsafe in-process sandbox with task.options.sandbox.backend=process")


class SandboxUnavailable(RuntimeError):
    """The back end cannot run on this machine; the message says why and what to do."""


def _installation() -> list[str]:
    """The interpreter's installation, where it is not under a system folder (bound on its own)."""
    prefix = os.path.realpath(sys.base_prefix)
    return [] if any(prefix == folder or prefix.startswith(folder + "/") for folder in SYSTEM_FOLDERS) else [prefix]


def _bound_paths() -> list[str]:
    """Every host path the sandbox reads (its disks' reads are throttled)."""
    return [*(os.path.realpath(folder) for folder in SYSTEM_FOLDERS if os.path.exists(folder)), *_installation(),
            str(CHILD_PROGRAM)]


def _folder_arguments() -> list[str]:
    """Read-only binds of the system folders and the interpreter's installation (symlinks kept as links)."""
    arguments: list[str] = []
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            arguments += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            arguments += ["--ro-bind", folder, folder]
    for prefix in _installation():
        arguments += ["--ro-bind", prefix, prefix]
    return arguments


DEVICES = ("null", "zero", "full", "random", "urandom")
"""The host's device nodes bound into the sandbox's ``/dev``: those innocent code opens, nothing that allocates."""


def _device_arguments() -> list[str]:
    """A ``/dev`` of :data:`DEVICES` only (bubblewrap's ``--dev`` would add ``/dev/ptmx`` and a ``devpts``)."""
    arguments = ["--tmpfs", "/dev"]
    for name in DEVICES:
        arguments += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    return arguments


def bwrap_command(executable: str, seccomp_fd: int, launch: Launch) -> list[str]:
    """The full command line of one run (``{events_fd}`` is filled in by :class:`LocalSession`)."""
    return [
        *launch.command, executable, "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--hostname", "sandbox", *_folder_arguments(), "--ro-bind", str(CHILD_PROGRAM), CHILD_INSIDE,
        *_device_arguments(), *launch.folders, "--remount-ro", "/dev", "--remount-ro", "/",
        "--chdir", "/tmp", "--seccomp", str(seccomp_fd),
        os.path.realpath(sys.executable), "-I", "-S", "-B", CHILD_INSIDE, "{events_fd}",
    ]


@functools.cache
def unavailable_reason(executable: str) -> str | None:
    """Why ``bwrap`` cannot sandbox here (None when it can): probed once per process with a real run."""
    if not sandbox_seccomp.supported():
        return "no seccomp filter for this machine's architecture (known: x86_64, aarch64)"
    path = shutil.which(executable)
    if path is None:
        return f"{executable!r} is not installed"
    try:
        session = BwrapSandbox(path).start("", SandboxLimits(wall_seconds=20))
    except OSError as error:
        return str(error)
    loaded = session.events.loaded
    (probe, _), = session.close()
    if probe.status != "ok" or not loaded:
        return f"{path} cannot make its namespaces here: {(probe.stderr or probe.error or probe.status).strip()}"
    return None


@BACKENDS.register("bwrap")
class BwrapSandbox:
    """Runs each program in a fresh bubblewrap sandbox; refuses to be made where bubblewrap cannot run."""

    unsafe = False

    def __init__(self, executable: str = "bwrap") -> None:
        """``executable``: the bubblewrap program (a name on ``PATH`` or a path)."""
        self.executable = executable
        self.isolation = "bwrap (namespaces, unprivileged user, read-only root, private tmpfs, seccomp)"

    @classmethod
    def from_options(cls, executable: str = "bwrap") -> BwrapSandbox:
        """The back end, or :class:`SandboxUnavailable` naming why not and how to install bubblewrap."""
        reason = unavailable_reason(executable)
        if reason is not None:
            raise SandboxUnavailable(f"the bwrap sandbox cannot run: {reason}. To grade code, {INSTALL_HINT}.")
        return cls(shutil.which(executable) or executable)

    def start(self, source: str, limits: SandboxLimits) -> LocalSession:
        cgroup = sandbox_cgroup.create((limits.memory_mb + limits.disk_mb) << 20, limits.read_mb_per_second << 20,
                                       limits.read_ops_per_second, tuple(_bound_paths()))
        try:
            return self._session(source, limits, cgroup)
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            raise

    def _session(self, source: str, limits: SandboxLimits, cgroup: RunCgroup | None) -> LocalSession:
        """The started run, its first process joining ``cgroup`` (when there is one)."""
        payload, tag = job(source, [], limits, seal=sandbox_seccomp.build_exec_seal())
        launch = sandbox_user.launcher([*_installation(), str(CHILD_PROGRAM)], limits.disk_mb << 20, limits.files,
                                       tuple(cgroup.procs) if cgroup else ())
        seccomp_read, seccomp_write = os.pipe()
        try:
            os.write(seccomp_write, sandbox_seccomp.build_filter())
            os.close(seccomp_write)
            return LocalSession(bwrap_command(self.executable, seccomp_read, launch), payload, tag,
                                wall_seconds=limits.wall_seconds, output_bytes=limits.file_size_mb << 20,
                                captured_bytes=limits.captured_bytes, answer_values=limits.answer_values,
                                pass_fds=(seccomp_read,),
                                env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}, cgroup=cgroup)
        finally:
            os.close(seccomp_read)
