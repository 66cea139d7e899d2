"""The program :mod:`tasks.sandbox` runs in the sandboxed process (``python -I -S -B``, stdlib only).

It reads one job from stdin (JSON: ``nonce``, ``source``, ``tests``, ``limits``), lowers its own
resource limits, installs an audit hook that refuses network, process creation, native code
(``ctypes``) and file access outside its working directory (reads of the standard library
excepted), then executes ``source`` and each test in one namespace. After every test it
appends a verdict line ``<nonce> <json>`` to the file descriptor it was given, so a run killed
at its time limit still reports the tests it passed. Any refused operation is recorded even if
the code catches the error: a run that tried one scores zero.

Deliberately self-contained: it may import nothing but the standard library.
"""

import json
import os
import resource
import sys
import sysconfig
import threading

_PATH_EVENTS = {
    # event -> positions of path arguments, and whether the event only reads
    "open": ((0,), None),  # mode decides: see _opens_for_writing
    "os.listdir": ((0,), True),
    "os.scandir": ((0,), True),
    "os.chdir": ((0,), True),
    "glob.glob": ((0,), True),
    "os.mkdir": ((0,), False),
    "os.remove": ((0,), False),
    "os.rmdir": ((0,), False),
    "os.rename": ((0, 1), False),
    "os.link": ((0, 1), False),
    "os.symlink": ((0, 1), False),
    "os.truncate": ((0,), False),
    "os.chmod": ((0,), False),
    "os.chown": ((0,), False),
    "os.utime": ((0,), False),
    "shutil.rmtree": ((0,), False),
    "shutil.copyfile": ((0, 1), False),
    "shutil.move": ((0, 1), False),
}
_NETWORK_EVENTS = ("socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
                   "socket.gethostbyname", "socket.gethostbyaddr", "socket.sendto")
_PROCESS_EVENTS = ("os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "os.kill", "os.killpg", "pty.spawn", "os.startfile")
_FORBIDDEN_MODULES = {"ctypes", "_ctypes", "_posixsubprocess", "cffi"}


def _opens_for_writing(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return any(letter in mode for letter in "wax+")
    return isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))


class Guard:
    """The audit hook: refuses what the sandbox forbids and remembers every refusal."""

    def __init__(self, work_dir: str, readable_roots: list[str]) -> None:
        self.work_dir = os.path.realpath(work_dir)
        self.readable_roots = [os.path.realpath(root) for root in readable_roots]
        self.violations: list[str] = []
        self._busy = threading.local()

    def _inside(self, path: str, roots: list[str]) -> bool:
        real = os.path.realpath(path)
        return any(real == root or real.startswith(root + os.sep) for root in roots)

    def _refuse(self, kind: str, detail: str) -> None:
        message = f"{kind}: {detail}"
        if message not in self.violations:
            self.violations.append(message)
        raise PermissionError(f"sandbox refused {message}")

    def __call__(self, event: str, args: tuple) -> None:
        if getattr(self._busy, "active", False):
            return
        self._busy.active = True
        try:
            self._check(event, args)
        finally:
            self._busy.active = False

    def _check(self, event: str, args: tuple) -> None:
        if event in _NETWORK_EVENTS:
            self._refuse("network", event)
        if event in _PROCESS_EVENTS:
            self._refuse("process", event)
        if event == "import" and args and str(args[0]).split(".")[0] in _FORBIDDEN_MODULES:
            self._refuse("native code", f"import {args[0]}")
        if event not in _PATH_EVENTS:
            return
        positions, reads_only = _PATH_EVENTS[event]
        if event == "open":
            reads_only = not _opens_for_writing(args[1] if len(args) > 1 else "r", args[2] if len(args) > 2 else 0)
        roots = [self.work_dir] + (self.readable_roots if reads_only else [])
        for position in positions:
            if position >= len(args) or args[position] is None or isinstance(args[position], int):
                continue  # an already open file descriptor, or the current directory
            path = os.fsdecode(args[position])
            if not self._inside(path, roots):
                self._refuse("file access", f"{event} {path!r}")


def _limit(kind: int, value: int) -> None:
    soft, hard = resource.getrlimit(kind)
    wanted_hard = value if hard == resource.RLIM_INFINITY else min(hard, value)
    resource.setrlimit(kind, (min(value, wanted_hard), wanted_hard))


def _lower_limits(limits: dict) -> None:
    cpu = int(limits["cpu_seconds"])
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1 if hard == resource.RLIM_INFINITY else min(hard, cpu + 1)))
    _limit(resource.RLIMIT_AS, int(limits["memory_mb"]) << 20)
    _limit(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) << 20)
    _limit(resource.RLIMIT_NOFILE, int(limits["open_files"]))
    _limit(resource.RLIMIT_NPROC, int(limits["processes"]))
    _limit(resource.RLIMIT_CORE, 0)


def _error_name(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:300]


def main() -> None:
    job = json.loads(sys.stdin.read())
    verdicts = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    nonce = job.pop("nonce")
    readable = sorted({path for path in sysconfig.get_paths().values() if os.path.isdir(path)} | set(sys.path) - {""})
    guard = Guard(os.getcwd(), [path for path in readable if os.path.isdir(path)])
    _lower_limits(job["limits"])
    sys.addaudithook(guard)
    state = {"passed": 0, "total": len(job["tests"]), "error": None}

    def report() -> None:
        verdicts.write(f"{nonce} {json.dumps({**state, 'violations': guard.violations})}\n")

    namespace = {"__name__": "__main__"}
    try:
        exec(compile(job["source"], "<solution>", "exec"), namespace)
    except BaseException as error:  # noqa: BLE001 - whatever the code raises is its result
        state["error"] = _error_name(error)
        report()
        return
    for index, test in enumerate(job["tests"]):
        try:
            exec(compile(test, f"<test {index}>", "exec"), namespace)
            state["passed"] += 1
        except BaseException as error:  # noqa: BLE001
            state["error"] = state["error"] or f"test {index}: {_error_name(error)}"
        report()
    if not job["tests"]:
        report()


if __name__ == "__main__":
    main()
