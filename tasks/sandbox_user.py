"""The host user a ``bwrap`` sandbox runs as: never root, so ``RLIMIT_NPROC`` binds it.

The kernel lets a task whose real user is host root (uid 0, whatever it is called in its own
user namespace) create processes and threads past ``RLIMIT_NPROC``. A trainer running as root
would hand bubblewrap, and so the sandboxed code, that exemption: raw ``clone`` threads could
then take every process id of the host. So when this process is root, bubblewrap is started as
``SANDBOX_UID`` (``nobody``, no supplementary groups): the code is an
ordinary host user, its thread count is held to ``SandboxLimits.processes`` (counted per user
namespace: each run has its own), and it owns none of the files bound into it (no leases).

An unprivileged bubblewrap can only bind what that user can reach, and the interpreter often
lives under a folder others cannot search (``/root/.pyenv``, a 0700 home). So the trainer makes
one private mount namespace per process (this file run as a script, as root, once): each such
folder, and ``/tmp``, is covered there by an empty tmpfs, and the paths the sandbox needs are
bound back at their own place. Each run then enters it (``nsenter``), makes a mount namespace of
its own (``unshare``) holding its writable folder, a tmpfs capped in size *and* in files (bubblewrap's
own ``--tmpfs`` takes a size only: file count would be bounded by CPU time alone), and drops to
``SANDBOX_UID`` (``setpriv``) before it starts bubblewrap. Nothing changes on the host; the
namespaces are gone with the trainer's file descriptor and the run's last process.

A trainer that is not root starts bubblewrap as itself (``RLIMIT_NPROC`` binds it already), and its
folder is bubblewrap's ``--tmpfs``: capped in size, not in file count.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass

SANDBOX_UID = 65534
STAGE = "/tmp/sandbox"
"""Where a run mounts its writable folder before bubblewrap binds it at ``/tmp`` (in its own mount namespace)."""
SHM_BYTES = 1 << 20
"""``/dev/shm`` of a sandbox started by a user other than root: a tmpfs of its own."""
_RUN = ('for procs in $3; do echo $$ > "$procs" || exit 1; done && '
        'mount -t tmpfs -o "size=$1,nr_inodes=$2,uid={uid},gid={uid},mode=0755" sandbox {stage} && shift 3 && '
        'exec "$0" --reuid={uid} --regid={uid} --clear-groups -- "$@"')
"""As root, in the run's mount namespace: join the run's cgroups (their ``cgroup.procs`` files, blank-separated) before
anything else runs, mount the writable folder, drop to ``SANDBOX_UID`` and start bubblewrap."""
_CLONE_NEWNS, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x00020000, 0x1000, 0x4000, 0x40000
_MAKING = threading.Lock()
"""Held while the mount namespace is made: reward workers starting their first runs at once share one."""


@dataclass(frozen=True)
class Launch:
    """How to start bubblewrap for one run: the command before it, and bubblewrap's arguments that put the writable
    folder at ``/tmp`` (and ``/dev/shm``, for POSIX semaphores)."""

    command: list[str]
    folders: list[str]


def covered_folders(paths: list[str], always: tuple[str, ...] = ("/tmp",)) -> list[str]:
    """``always`` and the topmost folder above each path that others (a user owning nothing) cannot search, those
    under another left out."""
    found = list(always)
    for path in paths:
        parts = path.strip("/").split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/" + "/".join(parts[:depth])
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                found.append(folder)
                break
    return [folder for folder in dict.fromkeys(found)
            if not any(folder.startswith(other + "/") for other in found)]


@functools.cache
def _mount_namespace(paths: tuple[str, ...]) -> int:
    """A file descriptor on the private mount namespace where ``paths`` are reachable (made once per process)."""
    plan = json.dumps([list(paths), covered_folders(list(paths))])
    helper = subprocess.Popen([sys.executable, "-I", "-S", __file__, plan], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if helper.stdout.read(5) != b"ready":
            raise OSError(f"the sandbox's mount namespace could not be made: {helper.stderr.read().decode().strip()}")
        return os.open(f"/proc/{helper.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.stdin.close()
        helper.wait()


@functools.cache
def _tools() -> dict[str, str]:
    """The util-linux programs a root trainer's runs go through, by name, as paths."""
    tools = {name: shutil.which(name) for name in ("nsenter", "unshare", "setpriv")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        raise OSError(f"{', '.join(missing)} (util-linux) not installed: as root the sandbox needs them to run the "
                      "code as an unprivileged user")
    return tools


def launcher(paths: list[str], disk_bytes: int, files: int, cgroup_procs: tuple[str, ...] = ()) -> Launch:
    """How to start bubblewrap with ``paths`` reachable and a writable folder of ``disk_bytes`` and ``files``: as
    ``SANDBOX_UID`` when this process is root, as this process's user otherwise (its folder then uncapped in files).
    ``cgroup_procs``: the process lists of the run's cgroups, which its first process joins (root only)."""
    if os.geteuid() != 0:
        return Launch([], ["--size", str(disk_bytes), "--tmpfs", "/tmp", "--size", str(SHM_BYTES), "--tmpfs",
                           "/dev/shm"])
    tools = _tools()
    with _MAKING:
        namespace = _mount_namespace(tuple(paths))
    # named through this process's /proc entry, not passed down: an inherited descriptor would reach the code
    command = [tools["nsenter"], f"--mount=/proc/{os.getpid()}/fd/{namespace}", "--", tools["unshare"], "--mount",
               "--propagation", "private", "--", "/bin/sh", "-c", _RUN.format(uid=SANDBOX_UID, stage=STAGE),
               tools["setpriv"], str(disk_bytes), str(files), " ".join(cgroup_procs)]
    return Launch(command, ["--bind", STAGE, "/tmp", "--bind", STAGE, "/dev/shm"])


def main() -> None:
    """As root: unshare a mount namespace, cover each folder with a tmpfs, bind the paths back, wait."""
    paths, covered = json.loads(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")

    check(libc.unshare(_CLONE_NEWNS), "unshare")
    check(libc.mount(b"none", b"/", None, _MS_PRIVATE | _MS_REC, None), "make / private")
    kept = {path: os.open(path, os.O_PATH) for path in paths}
    for folder in covered:
        check(libc.mount(b"tmpfs", folder.encode(), b"tmpfs", 0, b"mode=0755,size=64k"), f"tmpfs on {folder}")
    os.mkdir(STAGE)
    for path, descriptor in kept.items():
        if any(path.startswith(folder + "/") for folder in covered):
            if os.path.isdir(f"/proc/self/fd/{descriptor}"):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "x").close()
            check(libc.mount(f"/proc/self/fd/{descriptor}".encode(), path.encode(), None, _MS_BIND | _MS_REC, None),
                  f"bind {path}")
    sys.stdout.write("ready")
    sys.stdout.flush()
    sys.stdin.read()


if __name__ == "__main__":
    main()
