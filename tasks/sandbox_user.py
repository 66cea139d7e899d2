"""The host user a ``bwrap`` sandbox runs as: never root, so ``RLIMIT_NPROC`` binds it.

The kernel lets a task whose real user is host root (uid 0, whatever it is called in its own
user namespace) create processes and threads past ``RLIMIT_NPROC``. A trainer running as root
would hand bubblewrap, and so the sandboxed code, that exemption: raw ``clone`` threads could
then take every process id of the host. So when this process is root, bubblewrap is started as
``SANDBOX_UID`` (``nobody``, no supplementary groups) by ``nsenter --setuid``: the code is an
ordinary host user, its thread count is held to ``SandboxLimits.processes`` (counted per user
namespace: each run has its own), and it owns none of the files bound into it (no leases).

An unprivileged bubblewrap can only bind what that user can reach, and the interpreter often
lives under a folder others cannot search (``/root/.pyenv``, a 0700 home). So the trainer makes
one private mount namespace per process (this file run as a script, as root, once): each such
folder is covered there by an empty tmpfs, and the paths the sandbox needs are bound back at
their own place. bubblewrap is entered into that namespace, nothing changes on the host, and
the namespace is gone with the trainer's file descriptor.
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

SANDBOX_UID = 65534
_CLONE_NEWNS, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x00020000, 0x1000, 0x4000, 0x40000


def hidden_folders(paths: list[str]) -> list[str]:
    """The topmost folder above each path that others (a user owning nothing) cannot search, once each."""
    found: list[str] = []
    for path in paths:
        parts = path.strip("/").split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/" + "/".join(parts[:depth])
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                if folder not in found:
                    found.append(folder)
                break
    return found


@functools.cache
def _mount_namespace(paths: tuple[str, ...]) -> int:
    """A file descriptor on the private mount namespace where ``paths`` are reachable (made once per process)."""
    plan = json.dumps([list(paths), hidden_folders(list(paths))])
    helper = subprocess.Popen([sys.executable, "-I", "-S", __file__, plan], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if helper.stdout.read(5) != b"ready":
            raise OSError(f"the sandbox's mount namespace could not be made: {helper.stderr.read().decode().strip()}")
        return os.open(f"/proc/{helper.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.stdin.close()
        helper.wait()


def launcher(paths: list[str]) -> tuple[list[str], tuple[int, ...]]:
    """The command prefix that starts bubblewrap as ``SANDBOX_UID`` with ``paths`` reachable, and the file
    descriptor it needs; nothing for a trainer that is not root (bubblewrap then runs as the trainer's user)."""
    if os.geteuid() != 0:
        return [], ()
    nsenter = shutil.which("nsenter")
    if nsenter is None:
        raise OSError("nsenter (util-linux) is not installed: as root the sandbox needs it to drop to an unprivileged user")
    namespace = _mount_namespace(tuple(paths))
    return ([nsenter, f"--mount=/proc/self/fd/{namespace}", f"--setuid={SANDBOX_UID}", f"--setgid={SANDBOX_UID}",
             "--"], (namespace,))


def main() -> None:
    """As root: unshare a mount namespace, cover each hidden folder with a tmpfs, bind the paths back, wait."""
    paths, hidden = json.loads(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")

    check(libc.unshare(_CLONE_NEWNS), "unshare")
    check(libc.mount(b"none", b"/", None, _MS_PRIVATE | _MS_REC, None), "make / private")
    kept = {path: os.open(path, os.O_PATH) for path in paths}
    for folder in hidden:
        check(libc.mount(b"tmpfs", folder.encode(), b"tmpfs", 0, b"mode=0755,size=64k"), f"tmpfs on {folder}")
    for path, descriptor in kept.items():
        if any(path.startswith(folder + "/") for folder in hidden):
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
