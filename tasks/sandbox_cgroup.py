"""A memory cgroup per ``bwrap`` run: one cap on its memory, tmpfs, page tables and kernel buffers together.

rlimits bound a process's address space, not the kernel memory it makes the host hold for it: one
page mapped in each of 61,000 separate 1 GiB regions held ~490 MB of page tables at ``memory_mb``
256, and pipe and socket buffers are outside ``memory_mb`` as well. A memory cgroup counts all of
them. Each run gets its own, a child of this process's memory cgroup (so it stays within whatever
caps the trainer), limited to ``memory_mb`` + ``disk_mb``; the run's first process joins it before
it starts bubblewrap (:mod:`tasks.sandbox_user`), so no untrusted code runs outside it, and it is
removed after the run. cgroup v1 (``memory.limit_in_bytes``) or v2 (``memory.max``; only where this
process's cgroup may have children with the memory controller: the root, or a delegated one).

Where neither is possible (no memory controller, not root, a cgroup v2 leaf) runs go without one,
said once in the log.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)
_RUNS = itertools.count()
_PREFIX = "mmgrpo-sandbox-"
"""A run's cgroup is ``mmgrpo-sandbox-<trainer pid>-<run number>``."""
_REMOVE_SECONDS = 1.0
"""How long removal waits for the run's last processes to be gone (they are killed and reaped before)."""


@dataclass(frozen=True)
class Hierarchy:
    """Where runs' cgroups go, and the names of the limit file and of the file counting OOM kills."""

    parent: str
    limit_file: str
    oom_file: str


@dataclass(frozen=True)
class RunCgroup:
    """One run's cgroup: its folder and ``procs``, the file its first process writes its pid to."""

    path: str
    oom_file: str

    @property
    def procs(self) -> str:
        return os.path.join(self.path, "cgroup.procs")

    def remove(self) -> bool:
        """Remove the cgroup once its processes are gone; whether the kernel killed one for memory."""
        killed = _oom_kills(os.path.join(self.path, self.oom_file)) > 0
        deadline = time.monotonic() + _REMOVE_SECONDS
        while True:
            try:
                os.rmdir(self.path)
                return killed
            except FileNotFoundError:
                return killed
            except OSError:
                if time.monotonic() > deadline:
                    log.warning("could not remove the sandbox's memory cgroup %s", self.path)
                    return killed
                time.sleep(0.01)


def create(limit_bytes: int) -> RunCgroup | None:
    """A new memory cgroup capped at ``limit_bytes`` for one run, or None where this host allows none."""
    found = hierarchy()
    if isinstance(found, str):
        return None
    path = os.path.join(found.parent, f"{_PREFIX}{os.getpid()}-{next(_RUNS)}")
    try:
        os.mkdir(path, 0o700)
    except OSError as error:
        log.warning("a sandbox run goes without a memory cgroup: %s", error)
        return None
    try:
        with open(os.path.join(path, found.limit_file), "w") as limit:
            limit.write(str(limit_bytes))
    except OSError:
        os.rmdir(path)
        raise
    return RunCgroup(path, found.oom_file)


@functools.cache
def hierarchy() -> Hierarchy | str:
    """Where runs' cgroups go (this process's memory cgroup), or why they cannot be made here (logged once)."""
    try:
        found = "the trainer is not root" if os.geteuid() != 0 else _find()
    except (OSError, ValueError) as error:
        found = f"its cgroups could not be read: {error}"
    if isinstance(found, str):
        log.info("sandbox runs get no memory cgroup of their own (%s): their page tables and kernel buffers are "
                 "bounded by rlimits only", found)
    else:
        sweep(found.parent)
    return found


def sweep(parent: str) -> None:
    """Remove the runs' cgroups left under ``parent`` by trainers that were killed mid-run (their process is gone;
    their runs, which die with them, too)."""
    for name in os.listdir(parent):
        owner = name.split("-")[2] if name.startswith(_PREFIX) and name.count("-") == 3 else ""
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


def _find() -> Hierarchy | str:
    """The hierarchy to use, or why there is none: cgroup v2 with the memory controller first, then v1's."""
    mounts: dict[str, tuple[str, str]] = {}
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields, _, tail = line.partition(" - ")
            kind, _, options = tail.split()[:3]
            if kind == "cgroup2" or (kind == "cgroup" and "memory" in options.split(",")):
                mounts.setdefault(kind, (fields.split()[3], fields.split()[4]))
    own: dict[str, str] = {}
    with open("/proc/self/cgroup") as cgroups:
        for line in cgroups:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            own[controllers] = path
    if "cgroup2" in mounts and "" in own:
        folder = _folder(mounts["cgroup2"], own[""])
        if _has(os.path.join(folder, "cgroup.subtree_control"), "memory") and os.access(folder, os.W_OK):
            return Hierarchy(folder, "memory.max", "memory.events")
    v1 = next((path for controllers, path in own.items() if "memory" in controllers.split(",")), None)
    if "cgroup" in mounts and v1 is not None:
        folder = _folder(mounts["cgroup"], v1)
        if os.access(folder, os.W_OK):
            return Hierarchy(folder, "memory.limit_in_bytes", "memory.oom_control")
    return "no writable memory cgroup with room for children (cgroup v2: the trainer's is a leaf)"


def _folder(mount: tuple[str, str], path: str) -> str:
    """Where cgroup ``path`` is, on a mount (its root, its mount point) of that hierarchy."""
    root, point = mount
    inside = path[len(root):] if root != "/" and path.startswith(root) else path
    return point.rstrip("/") + "/" + inside.lstrip("/")


def _has(path: str, word: str) -> bool:
    try:
        with open(path) as file:
            return word in file.read().split()
    except OSError:
        return False


def _oom_kills(path: str) -> int:
    """The ``oom_kill`` count in a cgroup's ``memory.events`` (v2) or ``memory.oom_control`` (v1)."""
    try:
        with open(path) as file:
            return next((int(line.split()[1]) for line in file if line.startswith("oom_kill ")), 0)
    except (OSError, ValueError, IndexError):
        return 0
