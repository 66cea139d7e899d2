"""The program every sandbox back end runs around the untrusted code (``python -I -S -B``, stdlib only).

It reads one job, a JSON line, from stdin (``source``, ``calls``, ``silent``, ``limits``, ``guard``, ``tag``), lowers
its own resource limits, executes ``source``, then makes each call ``[name, args, kwargs]`` (arguments
in the value encoding below): the job's ``calls``, then one per further stdin line until stdin closes,
each answered before the next is read. ``source`` runs as a module of its own, :data:`MODULE_NAME` (never
``__main__``: its ``if __name__ == "__main__":`` block is skipped, as graders such as HumanEval's and MBPP's do),
with ``sys.argv`` its own and stdin at its end: the job's stdin is moved to another descriptor first, so ``input()``
or ``sys.stdin.read()`` meet the end of their input, not the calls. It writes one JSON line per event to the file
descriptor it was given (``argv[1]``; stdout when it is ``-`` or absent: a service that only returns stdout), each
line starting with ``tag`` (so the code's own prints are told apart):

- ``{"loaded": true}`` once ``source`` ran, or ``{"error": "..."}`` when it raised;
- ``{"i": k, "value": ...}`` or ``{"i": k, "raised": [type name, message]}`` per call (none for the first ``silent``
  calls: a replay's calls that an earlier run answered, made again only for the state they leave);
- ``{"violation": "..."}`` when the audit hook (``guard``) refused an operation.

It never sees the tests or their expected values, and it decides nothing: the caller decodes
the values into plain data of its own and runs the tests on them (:mod:`tasks.sandbox_grading`),
so whatever this process does (patched builtins, objects whose ``__eq__`` is always true,
forged lines) can at most claim return values for the calls it was asked to make.

The audit hook is the unsafe ``process`` back end's only guard (the ``bwrap`` and ``http``
back ends isolate the process from outside): it refuses network, process creation, native
code and file access outside the working directory, a policy's accidents rather than an attack.
"""

import json
import os
import resource
import sys
import sysconfig
import threading
import types

_PATH_EVENTS = {
    # event -> positions of path arguments, and whether the event only reads
    "open": ((0,), None),  # mode decides: see _opens_for_writing
    "os.listdir": ((0,), True), "os.scandir": ((0,), True), "os.chdir": ((0,), True), "glob.glob": ((0,), True),
    "os.mkdir": ((0,), False), "os.remove": ((0,), False), "os.rmdir": ((0,), False), "os.rename": ((0, 1), False),
    "os.link": ((0, 1), False), "os.symlink": ((0, 1), False), "os.truncate": ((0,), False),
    "os.chmod": ((0,), False), "os.chown": ((0,), False), "os.utime": ((0,), False),
    "shutil.rmtree": ((0,), False), "shutil.copyfile": ((0, 1), False), "shutil.move": ((0, 1), False),
}
_NETWORK_EVENTS = ("socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
                   "socket.gethostbyname", "socket.gethostbyaddr", "socket.sendto")
_PROCESS_EVENTS = ("os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "os.kill", "os.killpg", "pty.spawn", "os.startfile")
_FORBIDDEN_MODULES = {"ctypes", "_ctypes", "_posixsubprocess", "cffi"}
_MAX_DEPTH = 100
THREAD_STACK_BYTES = 1 << 20
"""Each new thread's stack (the default is RLIMIT_STACK, 8 MiB, all of it counted in RLIMIT_AS)."""
SECCOMP_SYSCALL = {"x86_64": 317, "aarch64": 277}
"""The number of seccomp(2), which adds a filter to every thread at once (prctl cannot)."""
POOL_EXTRA_THREADS = 4
"""``concurrent.futures.ThreadPoolExecutor``'s default workers: the CPUs it sees, plus these."""
_JSON_INT_BITS = 63
"""Wider ints travel as hexadecimal text: JSON's decimal digits stop at ``sys.get_int_max_str_digits()``."""
MODULE_NAME = "solution"
"""The candidate's module (in ``sys.modules``, so dataclasses, pickle and ``typing`` find it); ``sys.argv`` is
``[MODULE_NAME + ".py"]`` while it runs."""


def _opens_for_writing(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return any(letter in mode for letter in "wax+")
    return isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))


class Guard:
    """The audit hook: refuses what the ``process`` back end forbids and reports each refusal at once."""

    def __init__(self, work_dir: str, readable_roots: list, emit) -> None:
        self.work_dir = os.path.realpath(work_dir)
        self.readable_roots = [os.path.realpath(root) for root in readable_roots]
        self.emit = emit
        self._busy = threading.local()

    def _inside(self, path: str, roots: list) -> bool:
        real = os.path.realpath(path)
        return any(real == root or real.startswith(root + os.sep) for root in roots)

    def _refuse(self, kind: str, detail: str) -> None:
        message = f"{kind}: {detail}"
        self.emit({"violation": message})
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


def encode(value, depth: int = 0):
    """``value`` as JSON-safe data that keeps its kind (tuple, set, dict with any keys, bytes, and the standard
    library's ``OrderedDict``, ``Counter``, ``deque`` and ``Fraction``)."""
    if depth > _MAX_DEPTH:
        raise ValueError("the value is nested too deeply to return")
    inner = depth + 1
    if value is None or isinstance(value, bool):
        return None if value is None else bool(value)
    if isinstance(value, int):
        value = int(value)
        return value if value.bit_length() <= _JSON_INT_BITS else {"n": format(value, "x")}
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytearray):
        return {"ba": bytes(value).hex()}
    if isinstance(value, bytes):
        return {"b": bytes(value).hex()}
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    if isinstance(value, list):
        return [encode(item, inner) for item in value]
    tag = _library_tag(value)
    if tag == "dq" and value.maxlen is not None:
        return {"dqm": [int(value.maxlen), _library_body(tag, value, inner)]}
    if tag is not None:
        return {tag: _library_body(tag, value, inner)}
    if isinstance(value, tuple):
        return {"t": [encode(item, inner) for item in value]}
    if isinstance(value, frozenset):
        return {"fs": [encode(item, inner) for item in value]}
    if isinstance(value, set):
        return {"s": [encode(item, inner) for item in value]}
    if isinstance(value, dict):
        return {"d": [[encode(key, inner), encode(item, inner)] for key, item in value.items()]}
    raise TypeError(f"a value of type {type(value).__name__} cannot be returned out of the sandbox (plain data only)")


def decode(data, depth: int = 0):
    """The arguments' inverse of :func:`encode` (the caller has its own, see tasks.sandbox_grading)."""
    inner = depth + 1
    if isinstance(data, list):
        return [decode(item, inner) for item in data]
    if not isinstance(data, dict):
        return data
    (tag, body), = data.items()
    kinds = {"t": tuple, "s": set, "fs": frozenset}
    if tag in kinds:
        return kinds[tag](decode(item, inner) for item in body)
    if tag == "d":
        return {decode(key, inner): decode(item, inner) for key, item in body}
    if tag == "n":
        return int(body, 16)
    if tag == "ba":
        return bytearray.fromhex(body)
    if tag == "dqm":
        return __import__("collections").deque((decode(item, inner) for item in body[1]), maxlen=body[0])
    if tag in _LIBRARY_TAGS:
        module, name = _LIBRARY_TAGS[tag]
        kind = getattr(__import__(module), name)
        if tag == "q":
            return kind(*(decode(item, inner) for item in body))
        return kind(decode(item, inner) for item in body) if tag == "dq" else \
            kind({decode(key, inner): decode(item, inner) for key, item in body})
    return bytes.fromhex(body) if tag == "b" else complex(*body)


_LIBRARY_TAGS = {"od": ("collections", "OrderedDict"), "ct": ("collections", "Counter"),
                 "dq": ("collections", "deque"), "q": ("fractions", "Fraction")}
"""Standard-library kinds a value keeps (``Counter`` and ``OrderedDict`` compare, and have methods, unlike a dict).
Not ``Decimal``: comparing one with a wide int converts the int, quadratic in its digits, and one answer holding
both (they share a hash) held the trainer's GIL for 20 s."""


def _library_tag(value):
    """The tag of ``value``'s standard-library kind (:data:`_LIBRARY_TAGS`), or None. A module that is not imported
    made no value of its kinds, so none is imported here."""
    for tag, (module, name) in _LIBRARY_TAGS.items():
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type) and isinstance(value, kind):
            return tag
    return None


def _library_body(tag: str, value, inner: int):
    if tag == "q":
        return [encode(value.numerator, inner), encode(value.denominator, inner)]
    if tag == "dq":
        return [encode(item, inner) for item in value]
    return [[encode(key, inner), encode(item, inner)] for key, item in value.items()]


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
    _show_cpus(int(limits["processes"]))


def _show_cpus(processes: int) -> None:
    """Leave the code as many CPUs as a default thread pool (``ThreadPoolExecutor``: CPUs + 4 threads) can start threads
    for under ``processes`` (this thread and a spare counted), so innocent code does not fail on a many-core host;
    where the code sees the host's count from elsewhere (the ``process`` back end's ``/sys``) it is only a placement.
    Runs start at a random CPU (spread over the host's); the exec seal then refuses ``sched_setaffinity``."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        room = max(1, processes - POOL_EXTRA_THREADS - 2)
        if len(cpus) > room:
            start = int.from_bytes(os.urandom(4), "little") % len(cpus)  # a run's pid is always 1 in its namespace
            os.sched_setaffinity(0, (cpus + cpus)[start:start + room])
    except (AttributeError, OSError):  # no affinity here (not Linux), or a service that forbids it
        pass


def _install_filter(program: bytes) -> None:
    """Add the seccomp ``program`` (``struct sock_filter[]`` bytes) to this process's filters, for every thread."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    seccomp_set_mode_filter, tsync = 1, 1  # seccomp(2): SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC
    if libc.syscall(SECCOMP_SYSCALL.get(os.uname().machine, -1), seccomp_set_mode_filter, tsync,
                    ctypes.byref(fprog)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp: the child could not seal exec")


def _error_name(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:300]


def _requests(job: dict, jobs):
    """The calls to answer: the job's own (a service's one-shot stdin), then one JSON line each from ``jobs`` (the
    job's stdin) until it closes (a local session asks them one at a time, each after the answer to the last)."""
    yield from job.get("calls", [])
    for line in iter(jobs.readline, ""):
        yield json.loads(line)


def _take_stdin():
    """The job's stdin, moved to a descriptor of its own; descriptor 0 (``sys.stdin``) becomes a pipe at its end."""
    jobs = os.fdopen(os.dup(0), "r", encoding="utf-8")
    read_end, write_end = os.pipe()
    os.close(write_end)
    os.dup2(read_end, 0)
    os.close(read_end)
    return jobs


def main() -> None:
    jobs = _take_stdin()
    job = json.loads(jobs.readline())
    target = sys.argv[1] if len(sys.argv) > 1 else "-"
    channel = sys.stdout if target == "-" else os.fdopen(int(target), "w", buffering=1)
    lock, tag = threading.Lock(), job.get("tag", "")

    lead = "\n" if target == "-" else ""  # on stdout, after the code's prints: a print without "\n" cannot glue to it

    def emit(event: dict) -> None:
        with lock:
            channel.write(lead + tag + json.dumps(event) + "\n")
            channel.flush()

    threading.stack_size(THREAD_STACK_BYTES)
    _lower_limits(job["limits"])
    if job.get("seal"):
        try:
            _install_filter(bytes.fromhex(job["seal"]))
        except OSError as error:
            emit({"error": _error_name(error)})
            _exit()
    if job.get("guard"):
        readable = {path for path in sysconfig.get_paths().values() if os.path.isdir(path)} | set(sys.path) - {""}
        sys.addaudithook(Guard(os.getcwd(), [path for path in readable if os.path.isdir(path)], emit))
    module = sys.modules[MODULE_NAME] = types.ModuleType(MODULE_NAME)
    namespace, sys.argv = module.__dict__, [MODULE_NAME + ".py"]
    try:
        exec(compile(job["source"], "<solution>", "exec"), namespace)
    except BaseException as error:  # noqa: BLE001 - whatever the code raises is its result
        emit({"error": _error_name(error)})
        _exit()
    emit({"loaded": True})
    silent = int(job.get("silent", 0))
    for index, (name, args, kwargs) in enumerate(_requests(job, jobs)):
        try:
            if name not in namespace:
                raise NameError(f"name {name!r} is not defined")
            if index < silent:  # its answer and prints came in an earlier run: made again for its state only
                with _muted():
                    namespace[name](*decode(args), **decode(kwargs))
                continue
            value = namespace[name](*decode(args), **decode(kwargs))
            value = encode(value)
        except BaseException as error:  # noqa: BLE001
            if index >= silent:
                emit({"i": index, "raised": [type(error).__name__[:100], str(error)[:300]]})
            continue
        emit({"i": index, "value": value})
    _exit()


class _Discard:
    """A text stream that keeps nothing."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class _muted:
    """``sys.stdout`` and ``sys.stderr`` discarded for a while (a replayed call's prints were returned already)."""

    def __enter__(self) -> None:
        self.saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = _Discard()

    def __exit__(self, *_) -> None:
        sys.stdout, sys.stderr = self.saved


def _exit() -> None:
    """End now, the calls answered: threads the code left (a ``threading.Timer``) would keep the interpreter, and a
    service's run, waiting at exit until its wall clock."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - the code may have replaced or closed them
            pass
    os._exit(0)


if __name__ == "__main__":
    main()
