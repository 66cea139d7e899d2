"""Cgroups per ``bwrap`` run: one cap on its memory, tmpfs, page tables and kernel buffers together, and one on the
rate it reads the disks bound into it.

rlimits bound a process's address space, not the kernel memory it makes the host hold for it: one
page mapped in each of 61,000 separate 1 GiB regions held ~490 MB of page tables at ``memory_mb``
256, and pipe and socket buffers are outside ``memory_mb`` as well. A memory cgroup counts all of
them. Nor does any rlimit bound disk reads: ``O_DIRECT`` reads of a bound library, the same megabyte
again and again, read ~1.9 GB/s from the host's disk, for the whole wall clock, in every run at once.
An I/O cgroup throttles them (bytes and operations per second, on each whole disk behind the folders
the sandbox sees; reads served from the page cache are not throttled, nor need to be).

Each run gets its own cgroup in each hierarchy that has one of these controllers, a child of this
process's cgroup there (so it stays within whatever caps the trainer), limited to ``memory_mb`` +
``disk_mb`` and to ``read_mb_per_second``/``read_ops_per_second``; the run's first process joins them
before it starts bubblewrap (:mod:`tasks.sandbox_user`), so no untrusted code runs outside them, and
they are removed after the run (one still holding a process then is removed at a later run, as are those a killed
trainer left). cgroup v1 (``memory``, ``blkio``) or v2 (``memory``, ``io``; only
where this process's cgroup may have children with the controller: the root, or a delegated one).

Where a controller is missing (not root, a cgroup v2 leaf, a root file system on no block device)
runs go without it, said once in the log.
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
_V1_CONTROLLERS = {"memory": "memory", "blkio": "io"}
"""cgroup v1 controllers used, by the limit each sets."""


@dataclass(frozen=True)
class Hierarchy:
    """A hierarchy runs' cgroups go in: this process's cgroup there, its version, and the limits it sets."""

    parent: str
    version: int
    memory: bool = False
    io: bool = False

    def settings(self, memory_bytes: int, read_bytes: int, read_ops: int, devices: tuple[str, ...]) -> list[tuple]:
        """The (file, value) writes that set a run's limits, in order (one per device for the I/O limits; a limit of
        0 is none)."""
        writes: list[tuple[str, str]] = []
        if self.memory:
            writes.append(("memory.max" if self.version == 2 else "memory.limit_in_bytes", str(memory_bytes)))
        for device in devices if self.io else ():
            if self.version == 2:
                writes.append(("io.max", f"{device} rbps={read_bytes or 'max'} riops={read_ops or 'max'}"))
            else:  # 0 removes a v1 rule
                writes += [("blkio.throttle.read_bps_device", f"{device} {read_bytes}"),
                           ("blkio.throttle.read_iops_device", f"{device} {read_ops}")]
        return writes

    @property
    def oom_file(self) -> str:
        return "memory.events" if self.version == 2 else "memory.oom_control"

    def unthrottled(self, devices: tuple[str, ...]) -> list[tuple[str, str]]:
        """The (file, value) writes that remove the read limits of :meth:`settings`."""
        if not self.io:
            return []
        if self.version == 2:
            return [("io.max", f"{device} rbps=max riops=max") for device in devices]
        return [(name, f"{device} 0") for device in devices
                for name in ("blkio.throttle.read_bps_device", "blkio.throttle.read_iops_device")]


@dataclass(frozen=True)
class RunCgroup:
    """One run's cgroups (one per hierarchy), the file counting its OOM kills ('' when memory has none) and the
    (file, unthrottled value) writes that lift its I/O throttle."""

    paths: tuple[str, ...]
    oom_file: str = ""
    unthrottle: tuple[tuple[str, str], ...] = ()

    def lift_io(self) -> None:
        """Lift the read throttle, so that reads the run queued behind it finish at once (before its last processes
        are killed: a read the kernel is serving cannot be interrupted, and would keep them alive until served)."""
        for path, value in self.unthrottle:
            try:
                with open(path, "w") as limit:
                    limit.write(value)
            except OSError:
                pass

    @property
    def procs(self) -> list[str]:
        """The ``cgroup.procs`` files its first process writes its pid to."""
        return [os.path.join(path, "cgroup.procs") for path in self.paths]

    def remove(self) -> bool:
        """Remove the cgroups once their processes are gone; whether the kernel killed one for memory."""
        killed = bool(self.oom_file) and _oom_kills(self.oom_file) > 0
        for path in self.paths:
            _remove(path)
        return killed


_LEFT: list[str] = []
"""This trainer's run cgroups that could not be removed yet (a process still in them): tried again at each run."""


def _remove(path: str) -> None:
    deadline = time.monotonic() + _REMOVE_SECONDS
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                log.warning("could not remove the sandbox's cgroup %s yet (tried again at the next run)", path)
                _LEFT.append(path)
                return
            time.sleep(0.01)


def _remove_left() -> None:
    """Remove the cgroups earlier runs of this trainer, and trainers killed mid-run, left."""
    for path in list(_LEFT):
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:
            continue
        _LEFT.remove(path)
    for found in hierarchies():
        sweep(found.parent)


def create(memory_bytes: int, read_bytes: int, read_ops: int, bound: tuple[str, ...]) -> RunCgroup | None:
    """New cgroups for one run, capped at ``memory_bytes`` and, on the disks behind the ``bound`` folders, at
    ``read_bytes`` and ``read_ops`` per second; None where this host allows none (``OSError`` if a limit cannot be
    set on a cgroup made for it)."""
    _remove_left()
    throttled = bool(read_bytes or read_ops)
    devices, name = block_devices(bound) if throttled else (), f"{_PREFIX}{os.getpid()}-{next(_RUNS)}"
    if throttled and not devices and any(found.io for found in hierarchies()):
        _no_disk_found(bound)
    made: list[str] = []
    oom_file, unthrottle = "", []
    try:
        for found in hierarchies():
            if not found.memory and not throttled:
                continue
            path = os.path.join(found.parent, name)
            try:
                os.mkdir(path, 0o700)
            except OSError as error:
                log.warning("a sandbox run goes without its cgroup in %s: %s", found.parent, error)
                continue
            made.append(path)
            for setting, value in found.settings(memory_bytes, read_bytes, read_ops, devices):
                with open(os.path.join(path, setting), "w") as limit:
                    limit.write(value)
            if found.memory:
                oom_file = os.path.join(path, found.oom_file)
            unthrottle += [(os.path.join(path, setting), value) for setting, value in found.unthrottled(devices)]
    except OSError:
        for path in made:
            _remove(path)
        raise
    return RunCgroup(tuple(made), oom_file, tuple(unthrottle)) if made else None


@functools.cache
def hierarchies() -> tuple[Hierarchy, ...]:
    """Where runs' cgroups go (this process's cgroups with room for children), each missing limit logged once."""
    try:
        found = _find() if os.geteuid() == 0 else "the trainer is not root"
    except (OSError, ValueError) as error:
        found = f"its cgroups could not be read: {error}"
    reason = found if isinstance(found, str) else "no writable cgroup of the controller with room for children " \
        "(cgroup v2: the trainer's is a leaf)"
    found = () if isinstance(found, str) else found
    if not any(item.memory for item in found):
        log.info("sandbox runs get no memory cgroup of their own (%s): their page tables and kernel buffers are "
                 "bounded by rlimits only", reason)
    if not any(item.io for item in found):
        log.info("sandbox runs get no I/O cgroup of their own (%s): their disk reads are not throttled", reason)
    return found


def sweep(parent: str) -> None:
    """Remove the runs' cgroups left under ``parent`` by trainers that were killed mid-run (their process is gone;
    their runs, which die with them, too: a read throttle left on one is lifted, so its reads end at once)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        owner = name.split("-")[2] if name.startswith(_PREFIX) and name.count("-") == 3 else ""
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            path = os.path.join(parent, name)
            _lift_left_throttles(path)
            try:
                os.rmdir(path)
            except OSError:
                pass


def _lift_left_throttles(path: str) -> None:
    """Remove every read limit a left cgroup still has (v1 ``blkio``, v2 ``io``)."""
    for setting in ("blkio.throttle.read_bps_device", "blkio.throttle.read_iops_device", "io.max"):
        for line in _lines(os.path.join(path, setting)):
            device = line.split()[0] if line.split() else ""
            value = f"{device} rbps=max riops=max" if setting == "io.max" else f"{device} 0"
            try:
                with open(os.path.join(path, setting), "w") as limit:
                    limit.write(value)
            except OSError:
                pass


def _lines(path: str) -> list[str]:
    try:
        with open(path) as file:
            return file.read().splitlines()
    except OSError:
        return []


def _find() -> tuple[Hierarchy, ...]:
    """The hierarchies to use: cgroup v2 for each controller it delegates here, cgroup v1's for the others."""
    v2_mount, v1_mounts = None, {}
    for fields, kind, options in _mounts():
        if kind == "cgroup2":
            v2_mount = v2_mount or (fields[3], fields[4])
        elif kind == "cgroup":
            for controller in set(options.split(",")) & set(_V1_CONTROLLERS):
                v1_mounts.setdefault(controller, (fields[3], fields[4]))
    own: dict[str, str] = {}
    with open("/proc/self/cgroup") as cgroups:
        for line in cgroups:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(","):
                own[controller] = path
    found: list[Hierarchy] = []
    if v2_mount and "" in own:
        folder = _folder(v2_mount, own[""])
        delegated = _words(os.path.join(folder, "cgroup.subtree_control"))
        if _usable(folder) and {"memory", "io"} & delegated:
            found.append(Hierarchy(folder, 2, memory="memory" in delegated, io="io" in delegated))
    for controller, limit in _V1_CONTROLLERS.items():
        if any(getattr(item, limit) for item in found) or controller not in v1_mounts or controller not in own:
            continue
        folder = _folder(v1_mounts[controller], own[controller])
        if _usable(folder):
            found.append(Hierarchy(folder, 1, **{limit: True}))
    return tuple(found)


def _usable(folder: str) -> bool:
    """Whether runs' cgroups can go in ``folder``: writable, and named without blanks (the run's first process takes
    the list of its ``cgroup.procs`` files split at blanks)."""
    return os.access(folder, os.W_OK) and not any(character.isspace() for character in folder)


def _mounts() -> list[tuple[list[str], str, str]]:
    """``/proc/self/mountinfo``: each mount's leading fields, its file system type and its super options."""
    mounts = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields, _, tail = line.partition(" - ")
            kind, _, options = tail.split()[:3]
            mounts.append((fields.split(), kind, options))
    return mounts


@functools.cache
def block_devices(folders: tuple[str, ...]) -> tuple[str, ...]:
    """The whole disks (``major:minor``) holding ``folders`` and the mounts below them; file systems on no block
    device (tmpfs, overlay) have none."""
    points = [(fields[4], fields[2]) for fields, _, _ in _mounts()]
    numbers: set[str] = set()
    for folder in folders:
        inside = [(point, number) for point, number in points if _under(folder, point)]
        if inside:
            numbers.add(max(inside, key=lambda mount: len(mount[0]))[1])
        numbers.update(number for point, number in points if _under(point, folder))
    disks = {_whole_disk(number) for number in numbers}
    return tuple(sorted(disk for disk in disks if disk))


@functools.cache
def _no_disk_found(bound: tuple[str, ...]) -> None:
    log.info("sandbox runs' disk reads are not throttled: no block device found behind %s (btrfs, ZFS, overlay and "
             "network file systems show none in the mount table)", ", ".join(bound))


def _under(path: str, folder: str) -> bool:
    return path == folder or folder == "/" or path.startswith(folder.rstrip("/") + "/")


def _whole_disk(number: str) -> str:
    """The disk a block device ``major:minor`` is (or is a partition of), or '' when it is no block device."""
    entry = f"/sys/dev/block/{number}"
    if not os.path.exists(entry):
        return ""
    if not os.path.exists(os.path.join(entry, "partition")):
        return number
    try:
        with open(os.path.join(os.path.realpath(entry), "..", "dev")) as parent:
            return parent.read().strip()
    except OSError:
        return ""


def _folder(mount: tuple[str, str], path: str) -> str:
    """Where cgroup ``path`` is, on a mount (its root, its mount point) of that hierarchy."""
    root, point = mount
    inside = path[len(root):] if root != "/" and path.startswith(root) else path
    return point.rstrip("/") + "/" + inside.lstrip("/")


def _words(path: str) -> set[str]:
    try:
        with open(path) as file:
            return set(file.read().split())
    except OSError:
        return set()


def _oom_kills(path: str) -> int:
    """The ``oom_kill`` count in a cgroup's ``memory.events`` (v2) or ``memory.oom_control`` (v1)."""
    try:
        with open(path) as file:
            return next((int(line.split()[1]) for line in file if line.startswith("oom_kill ")), 0)
    except (OSError, ValueError, IndexError):
        return 0
