"""Red team: hostile programs submitted as completions, run on the default back end (bwrap).

Each attack class of the sandbox's threat model: reading or writing host files by every route,
processes that outlive the run, the network, signals and limits on the trainer, hangs,
resource exhaustion, forging the grade, leftovers. Each must end ``forbidden``, ``failed``,
``error``, ``timeout`` or a named limit, with no effect on this process (the trainer) or the host.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import platform
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tasks import sandbox_seccomp, sandbox_user
from tasks.code import sandbox_results
from tasks.sandbox import MAX_VIOLATIONS, STATUSES, SandboxLimits, run_tests
from tasks.sandbox_bwrap import BwrapSandbox, SandboxUnavailable

ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]
CORRECT_ADD = "def add(a, b):\n    return a + b\n"
BAD = set(STATUSES) - {"passed", "unavailable"}


@pytest.fixture(scope="module")
def sandbox() -> BwrapSandbox:
    try:
        return BwrapSandbox.from_options()
    except SandboxUnavailable as reason:
        pytest.skip(str(reason))


@pytest.fixture()
def limits() -> SandboxLimits:
    """A generous wall clock (the CPU is shared: a start can take seconds); hangs use :func:`short`."""
    return SandboxLimits(wall_seconds=15, cpu_seconds=2, memory_mb=256, file_size_mb=2, disk_mb=8)


def short(limits: SandboxLimits) -> SandboxLimits:
    """The same limits with a 3 s wall clock, for programs that only end there."""
    return dataclasses.replace(limits, wall_seconds=3)


def attack(sandbox, limits, source: str, tests: list[str] = ADD_TESTS):
    """Run ``source`` as a completion; it must score nothing."""
    result = run_tests(source, tests, sandbox, limits)
    assert result.status in BAD and result.fraction_passed == 0, result
    return result


def processes_with(marker: str, parts: tuple[str, ...] = ("cmdline", "comm")) -> list[int]:
    """Host processes whose command line or name (``comm``), or the ``parts`` of ``/proc/PID`` named, contain
    ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(marker.encode() in Path(f"/proc/{pid}/{part}").read_bytes() for part in parts):
                found.append(int(pid))
        except OSError:
            continue
    return found


MARKERS = itertools.count()
"""Numbers the markers of this worker's sandboxes."""
PF_EXITING = 0x4
"""``/proc/PID/stat``'s flag of a process inside ``exit()``."""


def running_code(pid: int) -> bool:
    """Whether any thread of ``pid`` can still run instructions of its own: one that is not gone, not a zombie (a
    leader that called ``exit`` alone shows as one while its other threads run on), not inside ``exit()``, and has
    no SIGKILL pending (a killed thread waiting on a throttled disk or its reaper runs nothing more). The threads
    are listed again after the check: one that started a successor and ended in between shows as a new one."""
    listed = _threads(pid)
    if any(_thread_can_run(f"/proc/{pid}/task/{thread}") for thread in listed):
        return True
    return bool(_threads(pid) - listed)


def _threads(pid: int) -> set[str]:
    try:
        return set(os.listdir(f"/proc/{pid}/task"))
    except (FileNotFoundError, ProcessLookupError):
        return set()


def _thread_can_run(folder: str) -> bool:
    try:
        fields = Path(f"{folder}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"{folder}/status").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return False
    pending = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    killed = any(mask >> (signal.SIGKILL - 1) & 1 for mask in pending)
    return fields[0] not in "ZX" and not int(fields[6]) & PF_EXITING and not killed


# --- file read/write, by every route ---------------------------------------------------------------------------

def test_host_files_cannot_be_read_by_path_fd_or_proc(sandbox, limits, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the-secret-value")
    routes = [
        f"print(open({str(secret)!r}).read())",
        f"import os\nprint(os.listdir({str(tmp_path)!r}))",
        "print(open('/proc/self/environ').read())",
        "import os\nfor fd in range(3, 64):\n    try:\n        print(os.readlink(f'/proc/self/fd/{fd}'))\n"
        "    except OSError:\n        pass\nraise SystemExit(1)",
        "print(open('/etc/passwd').read())",
    ]
    for source in routes:
        result = attack(sandbox, limits, source)
        assert "the-secret-value" not in result.stdout + result.stderr
        assert "root:" not in result.stdout


def test_it_inherits_no_file_descriptor_but_its_channels(sandbox, limits):
    """The launcher's handle on its mount namespace (or anything else of the trainer's) never reaches the code: it
    holds its stdout, stderr and event channel (sockets) and the pipe its stdin became, nothing else."""
    source = ("import os, stat\nkinds = set()\nfor fd in range(1024):\n    try:\n        mode = os.fstat(fd).st_mode\n"
              "    except OSError:\n        continue\n"
              "    kinds.add('pipe' if stat.S_ISFIFO(mode) else 'socket' if stat.S_ISSOCK(mode) else oct(mode))\n"
              "print(sorted(kinds))\nraise SystemExit(1)")
    assert attack(sandbox, limits, source).stdout == "['pipe', 'socket']\n"


def test_host_files_cannot_be_written_by_fspath_tricks_dir_fd_or_symlinks(sandbox, limits, tmp_path):
    target = tmp_path / "planted.txt"
    routes = [
        f"open({str(target)!r}, 'w').write('x')",
        # a path object that answers an innocent name first, the target second
        f"class P:\n    n = 0\n    def __fspath__(self):\n        P.n += 1\n        return 'ok.txt' if P.n == 1 else "
        f"{str(target)!r}\nopen(P(), 'w').write('x')\nopen(P(), 'w').write('x')\nraise SystemExit(1)",
        # dir_fd plus a symlink inside its own folder
        f"import os\nos.symlink({str(tmp_path)!r}, 'link')\nfd = os.open('.', os.O_RDONLY)\n"
        "os.open('link/planted.txt', os.O_CREAT | os.O_WRONLY, dir_fd=fd)",
        f"import os\nos.link({str(Path(os.__file__))!r}, 'hard')",
    ]
    for source in routes:
        attack(sandbox, limits, source)
        assert not target.exists()


def test_its_only_writable_places_are_its_own_size_limited_tmpfs(sandbox, limits):
    marker = f"mmgrpo-redteam-{os.getpid()}"
    folders = ["/", "/dev", "/dev/shm", "/tmp", "/usr", "/opt/mmgrpo", os.path.realpath(os.sys.base_prefix)]
    source = (f"import os\nwritten = []\nfor folder in {folders!r}:\n    try:\n"
              f"        with open(os.path.join(folder, {marker!r}), 'wb') as handle:\n"
              f"            for _ in range(16):\n                handle.write(b'x' * 1_000_000)\n"
              f"        written.append(folder)\n    except OSError:\n        pass\nprint(written)\nraise SystemExit(1)")
    result = attack(sandbox, limits, source)
    assert result.stdout == "[]\n"  # 16 MB fits nowhere: read-only, or past disk_mb / 1 MiB of /dev/shm
    assert not any(os.path.exists(os.path.join(folder, marker)) for folder in ("/tmp", "/dev/shm", "/"))


def test_the_python_installation_cannot_be_planted_with_a_pth_file(sandbox, limits):
    import sysconfig
    site = Path(sysconfig.get_paths()["purelib"])
    planted = site / "zz_mmgrpo_redteam.pth"
    source = f"open({str(planted)!r}, 'w').write('import os; os.system(\"touch /tmp/pwned\")')"
    result = attack(sandbox, limits, source)
    assert not planted.exists() and ("Read-only" in result.error or "No such file" in result.error)


@pytest.mark.parametrize("call", ["os.mknod('dev', 0o600 | stat.S_IFCHR, os.makedev(1, 3))", "os.mkfifo('fifo')"])
def test_device_nodes_and_fifos_are_forbidden(sandbox, limits, call):
    result = attack(sandbox, limits, f"import os, stat\n{call}\n{CORRECT_ADD}")
    assert result.status == "forbidden" and "seccomp" in result.error


@pytest.mark.skipif(platform.machine() != "x86_64", reason="raw x86-64 system call numbers")
@pytest.mark.parametrize("name", ["ptrace", "pidfd_send_signal", "pidfd_getfd", "process_vm_writev", "keyctl", "mount",
                                  "bpf", "io_uring_setup", "perf_event_open", "setns", "init_module"])
def test_raw_system_calls_past_pythons_wrappers_are_forbidden(sandbox, limits, name):
    number = sandbox_seccomp.NUMBERS[name][0]
    source = f"import ctypes\nctypes.CDLL(None).syscall({number}, 1, 0, 0, 0, 0, 0)\n{CORRECT_ADD}"
    result = attack(sandbox, limits, source)
    assert result.status == "forbidden" and "seccomp" in result.error


@pytest.mark.skipif(os.geteuid() != 0, reason="a trainer that is not root runs the sandbox as itself")
def test_a_root_trainer_runs_the_code_as_an_unprivileged_user_owning_nothing_it_sees(sandbox, limits):
    """Host root's real user is exempt from RLIMIT_NPROC and owns the files bound in (leases): not the code's user.
    (Host files show as uid 65534 inside, the kernel's name for an unmapped owner; O_NOATIME needs the real owner.)"""
    source = ("import os, sys\nprint(os.getuid(), os.getgid(), os.getgroups(), os.stat('.').st_uid == os.getuid())\n"
              "try:\n    os.open(sys.executable, os.O_RDONLY | os.O_NOATIME)\nexcept PermissionError:\n"
              "    print('not the owner')\nraise SystemExit(1)")
    uid = sandbox_user.SANDBOX_UID
    assert attack(sandbox, limits, source).stdout == f"{uid} {uid} [] True\nnot the owner\n"


def test_extended_attributes_are_refused_and_setuid_bits_mean_nothing(sandbox, limits):
    source = ("import os\nopen('f', 'w').close()\nos.chmod('f', 0o4755)\n"
              "os.setxattr('f', 'security.capability', b'\\x01' * 20)")
    result = attack(sandbox, limits, source)
    assert result.status == "error" and "PermissionError" in result.error


# --- processes that outlive the run, the network --------------------------------------------------------------

def test_no_process_outlives_the_run_even_a_double_forked_daemon(sandbox, limits):
    marker = "4242.123"
    source = (f"import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n    os._exit(0)\nimport time\ntime.sleep(0.5)\n"
              f"{CORRECT_ADD}")
    result = attack(sandbox, limits, source)
    assert result.status == "forbidden"  # it may not even fork
    time.sleep(0.2)
    assert processes_with(marker) == []


RAW_THREADS = (  # clone(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD), each thread parked in pause()
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nstart = ctypes.cast(libc.syscall, ctypes.c_void_p)\n"
    "stacks, made = [], 0\nfor _ in range({attempts}):\n    stacks.append(ctypes.create_string_buffer(65536))\n"
    "    top = (ctypes.addressof(stacks[-1]) + 65536 - 256) & ~15\n"
    "    if libc.clone(start, ctypes.c_void_p(top), 0x10F00, ctypes.c_void_p(34)) == -1:\n        {on_refusal}\n"
    "    made += 1\nprint(made, flush=True)\n")  # written at once: a raw thread may take the process down at exit
IO_SETUP = {"aarch64": 0}.get(platform.machine(), 206)  # the generic table's number, else x86-64's
CHILD_MEMORY = ("import os\nfor _ in range(16):\n    if os.fork() == 0:\n        data = bytearray(200 * 2 ** 20)\n"
                "        data[::4096] = b'x' * len(data[::4096])\n        import time\n        time.sleep(30)\n")
CHILD_CPU = ("import multiprocessing\ndef burn():\n    while True:\n        pass\n"
             "for _ in range(3):\n    multiprocessing.Process(target=burn).start()\n")


@pytest.mark.parametrize("source", [
    "import os\nwhile True:\n    os.fork()",  # a fork bomb: RLIMIT_NPROC does not hold root back
    CHILD_MEMORY,  # 16 children of 200 MB each: the memory limit is per process
    CHILD_CPU,  # three children burning CPU: so is the CPU limit
    "import subprocess\nsubprocess.run(['true'])",
    "import os\nos.posix_spawn('/bin/true', ['true'], {})",
    "import os\nos.memfd_create('anonymous')",  # memory outside the tmpfs's size
    "import ctypes\nctypes.CDLL(None).inotify_init1(0)",  # a per-user quota shared with the trainer
    "import ctypes\nctypes.CDLL(None).inotify_init()",
    "import ctypes\nctypes.CDLL(None).shmget(0, 1 << 20, 0o1600)",  # System V shared memory: outside RLIMIT_AS
    "import ctypes\nctypes.CDLL(None).semget(0, 1, 0o1600)",  # unreclaimable kernel memory
    "import ctypes\nctypes.CDLL(None).msgget(0, 0o1600)",
    "import ctypes, os\nctypes.CDLL('librt.so.1').mq_open(b'/q', os.O_CREAT | os.O_RDWR, 0o600, None)",  # user quota
    f"import ctypes\nctx = ctypes.c_ulong(0)\nctypes.CDLL(None).syscall({IO_SETUP}, 1, ctypes.byref(ctx))",  # aio-max-nr
    "import ctypes\nctypes.CDLL(None).fanotify_init(0, 0)",  # watches host processes' access to bound files
    "import socket\nsocket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)",  # a virtual machine's host
    "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM)",
    "import socket\nsocket.socket(socket.AF_INET6, socket.SOCK_STREAM)",
    "import socket\nsocket.socket(socket.AF_NETLINK, socket.SOCK_RAW)",
    "import socket\nsocket.socketpair(socket.AF_INET)",  # the socket family rule holds for pairs too
    "import socket\nsocket.socketpair(socket.AF_NETLINK, socket.SOCK_RAW)",
    RAW_THREADS.format(attempts=1, on_refusal="pass").replace("0x10F00", "0x10B00"),  # no CLONE_FILES: own fd table
])
def test_processes_memfd_ipc_aio_notify_and_sockets_but_unix_ones_are_forbidden(sandbox, limits, source):
    started = time.monotonic()
    result = attack(sandbox, limits, f"{source}\n{CORRECT_ADD}")
    assert result.status == "forbidden" and "seccomp" in result.error, result
    assert time.monotonic() - started < limits.wall_seconds


CLEARS_PARENT_DEATH_SIGNAL = "ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)\n"  # PR_SET_PDEATHSIG, 0
"""Round 10: bubblewrap's --die-with-parent is the parent-death signal, which the code could clear (now EPERM)."""
EXEC_FROM_A_THREAD = ("import threading\nthreading.Thread(target=os.execv, args=('/bin/sleep', ['sleep', '{marker}'])"
                      ").start()\n")
"""Round 10's check of that fix: a new thread has no parent-death signal, and its exec took the process over (now
exec kills the process: the child seals it before the code runs)."""


LEADER_EXITS_ALONE = ("import threading\nthreading.Thread(target=time.sleep, args=(50,)).start()\n"
                      "ctypes.CDLL(None).pthread_exit(None)\n")
"""The main thread ends alone: the process shows as a zombie while its other thread runs on."""


@pytest.mark.parametrize(("attack", "stop"), [("", "kill"), (CLEARS_PARENT_DEATH_SIGNAL, "kill"),
                                             (CLEARS_PARENT_DEATH_SIGNAL, "terminate"), (EXEC_FROM_A_THREAD, "kill"),
                                             (EXEC_FROM_A_THREAD, "terminate"), (LEADER_EXITS_ALONE, "kill")],
                         ids=["plain", "death-signal-cleared", "death-signal-cleared-sigterm", "exec-from-a-thread",
                              "exec-from-a-thread-sigterm", "leader-exits-alone"])
def test_a_killed_trainer_takes_its_running_sandboxes_with_it(sandbox, attack, stop):
    """The code names its thread (``comm``) to be found, then tries to outlive the trainer: the trainer is killed
    once the code runs (or its run has ended), and nothing of the code may be left."""
    # a number (sleep takes it) of this worker and variant: variants running at once on other workers stay apart
    marker = f"4343.{os.getpid():07d}{next(MARKERS):02d}"
    source = (f"import ctypes, os, time\nctypes.CDLL(None).prctl(15, b'{marker}', 0, 0, 0)\n"
              f"{attack.format(marker=marker)}time.sleep(50)")
    trainer = subprocess.Popen([sys.executable, "-c", (
        "from tasks.sandbox import SandboxLimits, run_tests\nfrom tasks.sandbox_bwrap import BwrapSandbox\n"
        f"print(run_tests({source!r}, [], BwrapSandbox(), SandboxLimits(wall_seconds=60)).status)")],
        stdout=subprocess.PIPE, text=True)
    try:  # the code names itself (comm); the trainer's command line holds the marker too
        deadline = time.monotonic() + 30
        while not processes_with(marker, ("comm",)) and trainer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the attack's own moves
        sealed = attack == EXEC_FROM_A_THREAD and trainer.poll() is not None  # the exec ended the run
        assert sealed or processes_with(marker, ("comm",)), "the code was not running when the trainer was stopped"
    finally:
        getattr(trainer, stop)()
        trainer.wait()
    deadline = time.monotonic() + 5
    while any(map(running_code, processes_with(marker))) and time.monotonic() < deadline:
        time.sleep(0.1)
    running = [pid for pid in processes_with(marker) if running_code(pid)]
    states = {pid: [Path(f"/proc/{pid}/task/{thread}/stat").read_text() for thread in _threads(pid)] for pid in running}
    for pid in running:
        os.kill(pid, signal.SIGKILL)
    assert running == [], states


@pytest.mark.parametrize("survivor", [
    "threading.Thread(target=time.sleep, args=(60,)).start()",
    "def hop():\n    threading.Thread(target=hop).start()\nthreading.Thread(target=hop).start()",  # thread after thread
], ids=["sleeping-thread", "hopping-threads"])
def test_a_process_whose_leader_exited_alone_still_counts_as_running(survivor):
    """The check above on a host process: its main thread ended (a zombie leader) and other threads run on."""
    process = subprocess.Popen([sys.executable, "-c", f"import ctypes, threading, time\n{survivor}\n"
                                "time.sleep(0.2)\nctypes.CDLL(None).pthread_exit(None)"])
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the main thread never ended"
            time.sleep(0.05)
        assert all(running_code(process.pid) for _ in range(200))
    finally:
        process.kill()
        process.wait()
    assert not running_code(process.pid)


def test_namespaces_and_tracing_are_forbidden(sandbox, limits):
    for source in ["import os\nos.unshare(os.CLONE_NEWUSER)", "import os\nos.setns(os.open('/proc/1/ns/net', 0))",
                   "import os\nos.unshare(os.CLONE_NEWNET)"]:
        result = attack(sandbox, limits, source)
        assert result.status in ("forbidden", "error")


class Listener:
    """A host socket (TCP on 127.0.0.1, or an abstract Unix socket) counting the connections it accepts."""

    def __init__(self, family: int = socket.AF_INET) -> None:
        self.server = socket.socket(family, socket.SOCK_STREAM)
        self.address = ("127.0.0.1", 0) if family == socket.AF_INET else f"\0mmgrpo-redteam-{os.getpid()}"
        self.server.bind(self.address)
        self.server.listen()
        self.server.settimeout(0.2)
        self.address = self.server.getsockname()
        self.accepted, self.running = 0, True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                connection, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.server.close()


def test_nothing_reaches_the_hosts_network_tcp_or_abstract_unix_sockets(sandbox, limits):
    tcp, unix = Listener(), Listener(socket.AF_UNIX)
    try:
        port = tcp.address[1]
        for source in [f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)",
                       f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({unix.address!r})",
                       "import socket\nsocket.create_connection(('example.com', 80), timeout=1)"]:
            attack(sandbox, limits, source)
    finally:
        tcp.close()
        unix.close()
    assert tcp.accepted == 0 and unix.accepted == 0


# --- the trainer: signals, limits, hangs ------------------------------------------------------------------------

def test_the_trainer_cannot_be_signalled_throttled_or_traced(sandbox, limits):
    trainer = os.getpid()
    own_limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    attacks = [
        f"import os, signal\nos.kill({trainer}, signal.SIGKILL)",
        f"import os, signal\nos.kill({trainer}, signal.SIGSTOP)",
        "import os, signal\nfor pid in range(1, 4096):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError:\n        pass\nraise SystemExit(1)",
        f"import os\nos.pidfd_open({trainer})",
        "import os\nos.pidfd_open(1)",
        f"import resource\nresource.prlimit({trainer}, resource.RLIMIT_NOFILE, (3, 3))",
        "import resource\nresource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3))",
    ]
    for source in attacks:
        attack(sandbox, limits, source)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == own_limit  # and we are still here


@pytest.mark.parametrize("source", [
    "import os, time\nr, w = os.pipe()\nfor fd in (0, 1, 2, 3, 4, 5):\n    try:\n        os.dup2(r, fd)\n"
    "    except OSError:\n        pass\ntime.sleep(100)",
    "import os, time\nif os.fork() == 0:\n    time.sleep(100)\nos._exit(0)",  # a child holding the pipes open
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
    "while True:\n    pass",
])
def test_hangs_end_at_the_wall_clock(sandbox, limits, source):
    limits = short(limits)
    started = time.monotonic()
    attack(sandbox, limits, source)
    assert time.monotonic() - started < limits.wall_seconds + 3


def test_huge_answers_cost_the_grader_little_and_score_nothing(sandbox, limits):
    """Answers it writes itself, 2 MB of ``[[],[],...]`` per call, to a check of six calls: the run ends at the
    1 MB answer line (``output_limit``); a value of more than 100,000 elements fails its test; the grader's CPU
    time and memory stay small (they were more than a minute and a gigabyte)."""
    forger = (
        "import sys\nframe = sys._getframe()\nwhile 'job' not in frame.f_locals:\n    frame = frame.f_back\n"
        "job, out = frame.f_locals['job'], frame.f_locals['channel']\nVALUE = '[' + ','.join(['[]'] * 700_000) + ']'\n"
        "CALLS = [0]\ndef f(x):\n    out.write(job['tag'] + '{\"i\": %d, \"value\": %s}\\n' % (CALLS[0], VALUE))\n"
        "    out.flush()\n    CALLS[0] += 1\n")
    check = ["def check(candidate):\n" + "".join(f"    assert candidate({n}) != {n}\n" for n in range(6)) + "check(f)"]
    memory_before, cpu_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.process_time()
    big = attack(sandbox, dataclasses.replace(limits, file_size_mb=8), forger, check)
    assert big.status == "output_limit" and "answer line" in big.error
    wide = attack(sandbox, limits, "def f(x):\n    return [[]] * 150_000", check)
    assert wide.status == "failed" and "more than 100000 values" in wide.error
    assert time.process_time() - cpu_before < 3
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - memory_before < 200 * 1024  # KiB
    fine = run_tests("def f(x):\n    return list(range(50_000))", ["assert f(0) == list(range(50_000))"], sandbox,
                     limits)
    assert fine.status == "passed"


@pytest.mark.parametrize("kind, tests", [("s", ["assert add(1, 2) == {3}"]), ("t", ["assert set(add(1, 2)) == {3}"])])
def test_returned_numbers_with_colliding_hashes_cannot_stall_the_grader(sandbox, limits, kind, tests):
    """Asked its first call, it writes the answer itself: 40,000 ints that all hash to 0 (under the 1 MB answer
    line), as a set or as a tuple a test makes a set of (either quadratic to build here)."""
    source = (
        "import sys, json\nframe = sys._getframe()\nwhile 'job' not in frame.f_locals:\n    frame = frame.f_back\n"
        "job, out = frame.f_locals['job'], frame.f_locals['channel']\n"
        "members = ','.join(str(k * (2 ** 61 - 1)) for k in range(1, 40_000))\n"
        "def add(a, b):\n"
        f"    out.write(job['tag'] + '{{\"i\": 0, \"value\": {{\"{kind}\": [%s]}}}}\\n' % members)\n"
        "    out.flush()"
    )
    started = time.monotonic()
    result = attack(sandbox, limits, source, tests)
    assert "share one hash" in result.error and time.monotonic() - started < 10


def test_reward_workers_survive_a_batch_of_hostile_completions(sandbox, limits):
    trainer = os.getpid()
    hostile = [f"import os, signal\nos.kill({trainer}, signal.SIGKILL)", f"import os\nos.pidfd_open({trainer})",
               "x = bytearray(10 ** 10)", "import os\nos.mkfifo('f')", CORRECT_ADD]
    completions = [f"```python\n{source}\n```" for source in hostile]
    results = sandbox_results(completions, [ADD_TESTS] * len(hostile), sandbox, limits, workers=4)
    assert [result.status == "passed" for result in results] == [False, False, False, False, True]


# --- resource exhaustion ----------------------------------------------------------------------------------------

def test_memory_disk_file_count_and_fork_bombs_are_contained(sandbox, limits):
    host_peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert attack(sandbox, limits, "x = bytearray(10 * 1024 ** 3)").status == "memory_limit"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - host_peak_before < 100 * 1024  # KiB
    disk = attack(sandbox, limits, "n = 0\nwhile True:\n    open(f'f{n}', 'wb').write(b'x' * 1_000_000)\n    n += 1")
    assert "No space left" in disk.error or "File too large" in disk.error
    files = attack(sandbox, limits, "import os\nn = 0\ntry:\n    while True:\n        os.close(os.open(f'f{n}', os.O_CREAT))\n"
                                    "        n += 1\nfinally:\n    print(n)")
    assert "No space left" in files.error and int(files.stdout) < limits.files  # not bounded by CPU time alone
    bomb = attack(sandbox, short(limits), "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                                   "        pass")
    assert bomb.status == "forbidden"


@pytest.mark.parametrize("source", [
    RAW_THREADS.format(attempts=400, on_refusal="break"),
    "import threading, time\nthreading.stack_size(65536)\nmade = 0\nfor _ in range(400):\n    try:\n"
    "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n    except RuntimeError:\n"
    "        break\n    made += 1\nprint(made)\n",
])
def test_threads_raw_or_not_stop_at_the_process_limit(sandbox, limits, source):
    """Each thread is a host process id: the run may make ``processes`` of them, not the host's 32,768 (as root,
    ``RLIMIT_NPROC`` did not bind: 400 raw clone threads were made, as many as asked)."""
    result = attack(sandbox, limits, f"{source}raise SystemExit(1)")
    assert 0 < int(result.stdout) < limits.processes, result


def test_a_thread_bomb_ends_at_a_limit_having_made_few_threads(sandbox, limits):
    result = attack(sandbox, short(limits), RAW_THREADS.format(attempts=10 ** 9, on_refusal="stacks.pop()\n        continue"))
    assert result.status in ("cpu_limit", "timeout") and result.stdout == "", result


def test_no_lease_on_the_host_files_it_can_read_nor_on_its_own(sandbox, limits):
    """A read lease on a host file makes every host process that opens it for writing wait (45 s, or until the
    run ends): the sandbox's user owns none of them, and the seccomp filter answers EPERM to any lease."""
    source = ("import errno, fcntl, os, sys\nopen('own', 'w').close()\nfor path in (sys.executable, 'own'):\n"
              "    fd = os.open(path, os.O_RDONLY)\n    try:\n        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)\n"
              "    except OSError as error:\n        print(errno.errorcode[error.errno])\nraise SystemExit(1)")
    assert attack(sandbox, limits, source).stdout == "EPERM\nEPERM\n"


def test_no_directory_notification_on_the_host_directories_it_can_read(sandbox, limits):
    """dnotify on a bound directory would signal the sandbox on host processes' access to it: EPERM."""
    source = ("import errno, fcntl, os, sys\nfd = os.open(os.path.dirname(sys.executable), os.O_RDONLY)\ntry:\n"
              "    fcntl.fcntl(fd, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT)\nexcept OSError as error:\n"
              "    print(errno.errorcode[error.errno])\nraise SystemExit(1)")
    assert attack(sandbox, limits, source).stdout == "EPERM\n"


def test_socket_buffers_cannot_be_enlarged_past_the_defaults(sandbox, limits):
    """Unix socket buffers are kernel memory outside ``memory_mb`` (64 pairs at 2 x wmem_max held ~1.3 GB):
    every buffer size option is refused, the pair itself works."""
    source = ("import errno, socket\na, b = socket.socketpair()\nfor option in (7, 8, 32, 33):\n    try:\n"
              "        a.setsockopt(socket.SOL_SOCKET, option, 1 << 30)\n    except OSError as error:\n"
              "        print(errno.errorcode[error.errno])\na.sendall(b'x')\nprint(b.recv(1))\nraise SystemExit(1)")
    assert attack(sandbox, limits, source).stdout == "EPERM\n" * 4 + "b'x'\n"


def test_dev_holds_no_pty_only_the_plain_devices(sandbox, limits):
    """``/dev/ptmx`` would allocate ptys from the host-wide ``kernel.pty.nr`` (two runs of raw threads took all
    3,072): ``/dev`` holds the plain devices and ``/dev/shm`` only, and they work."""
    source = ("import os\nprint(sorted(os.listdir('/dev')))\nos.open('/dev/ptmx', os.O_RDWR)\n")
    result = attack(sandbox, limits, source)
    assert result.stdout == "['full', 'null', 'random', 'shm', 'urandom', 'zero']\n", result
    assert "FileNotFoundError" in result.error, result
    innocent = ("import os, tempfile\nassert len(os.urandom(8)) == 8\nwith open('/dev/urandom', 'rb') as f:\n"
                "    assert len(f.read(8)) == 8\nwith open('/dev/null', 'w') as f:\n    f.write('x')\n"
                "with open('/dev/zero', 'rb') as f:\n    assert f.read(2) == bytes(2)\n"
                "with tempfile.NamedTemporaryFile(dir='/dev/shm') as f:\n    f.write(b'x')\n"
                f"with tempfile.TemporaryDirectory() as d:\n    pass\n{CORRECT_ADD}")
    assert run_tests(innocent, ADD_TESTS, sandbox, limits).status == "passed"


def test_output_floods_are_capped(sandbox, limits):
    result = attack(sandbox, limits, "while True:\n    print('y' * 1_000_000)")
    assert result.status == "output_limit" and len(result.stdout) <= limits.captured_bytes


# --- forging the grade ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
    "def add(a, b):\n    return Yes()",
    "class I(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return I(7)",
    "import builtins\nbuiltins.exec = lambda *a, **k: None\nbuiltins.AssertionError = type('No', (Exception,), {})\n"
    "def add(a, b):\n    return 7",
    "import sys\nframe = sys._getframe()\nwhile frame and 'job' not in frame.f_locals:\n    frame = frame.f_back\n"
    "TESTS = frame.f_locals['job'].get('tests') or []\ndef add(a, b):\n    return 7",  # the tests are not there to read
    "print('passed 3/3')\nprint('0123abcd {\"passed\": 3, \"total\": 3, \"error\": null, \"violations\": []}')\n"
    "def add(a, b):\n    return 7",
])
def test_eq_tricks_patched_builtins_and_printed_verdicts_score_nothing(sandbox, limits, source):
    result = attack(sandbox, limits, source)
    assert result.status == "failed" and result.passed == 0


SET_TESTS = ["assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))",
             "assert set(similar_elements((1, 2, 3, 4), (5, 4, 3, 7))) == set((3, 4))"]


@pytest.mark.parametrize("source, tests", [
    ("def similar_elements(a, b):\n    return None\nset = lambda *a, **k: 0\n", SET_TESTS),
    ("def f(x):\n    return 12345.0\nabs = lambda *a: 0\nround = lambda *a: 0\n",
     ["def check(candidate):\n    assert abs(candidate(3.5) - 0.5) < 1e-6\n    assert round(candidate(1.0)) == 0\n"
      "check(f)"]),
    ("def f(x):\n    return 'garbage'\nsorted = lambda *a, **k: 0\nall = lambda *a: True\n"
     "isinstance = lambda *a: True\nlen = lambda *a: 3\n",
     ["assert sorted(f([3, 1, 2])) == sorted([1, 2, 3])", "assert all(x > 0 for x in f([1]))",
      "assert isinstance(f([1]), list)", "assert len(f([1])) == 3"]),
])
def test_builtins_redefined_at_top_level_are_not_what_the_tests_call(sandbox, limits, source, tests):
    """A candidate's ``set = lambda ...`` is its own business: the tests keep the real builtins, and their
    expected values (``set((4, 5))``) never become calls into the sandbox."""
    result = attack(sandbox, limits, source, tests)
    assert result.status == "failed" and result.passed == 0


def test_a_stop_iteration_raised_by_the_candidate_does_not_end_the_tests_loops_early(sandbox, limits):
    """Re-raised as StopIteration here, it would end ``map`` at once: ``all(map(is_prime, ...))`` held for any code."""
    tests = ["assert all(map(is_prime, [2, 3, 5, 7]))", "assert not any(map(is_prime, [4, 6, 8]))",
             "for n in map(is_prime, [11, 13]):\n    assert n"]
    result = attack(sandbox, limits, "def is_prime(n):\n    raise StopIteration('wrong on purpose')\n", tests)
    assert result.status == "failed" and result.passed == 0 and "StopIteration" in result.error


def test_a_forger_who_reads_the_job_can_only_claim_return_values(sandbox, limits):
    """It finds its job (tag and calls) in the frames and writes answers first: still graded on those answers."""
    source = (
        "import sys, json\nframe = sys._getframe()\nwhile frame and 'job' not in frame.f_locals:\n"
        "    frame = frame.f_back\njob = frame.f_locals['job']\n"
        "out = frame.f_locals.get('channel', sys.stdout)\n"
        "for i, call in enumerate(job['calls']):\n"
        "    out.write(job['tag'] + json.dumps({'i': i, 'value': 3}) + '\\n')\n"
        "out.write(job['tag'] + json.dumps({'verdict': 'passed 3/3'}) + '\\n')\nout.flush()\n"
        "def add(a, b):\n    return 3"
    )
    result = run_tests(source, ADD_TESTS, sandbox, limits)
    assert (result.status, result.passed) == ("failed", 1)  # the one test whose answer happens to be 3


def test_forged_refusals_by_the_thousand_keep_a_few_and_a_count(sandbox, limits):
    """Every result the code task caches stays small: a handful of refusals, the rest counted, not parsed."""
    source = (
        "import sys\nframe = sys._getframe()\nwhile frame and 'job' not in frame.f_locals:\n"
        "    frame = frame.f_back\njob, out = frame.f_locals['job'], frame.f_locals['channel']\n"
        "out.write(''.join(job['tag'] + '{\"violation\": \"%06d\"}\\n' % i for i in range(20_000)))\nout.flush()\n"
        f"{CORRECT_ADD}"
    )
    result = attack(sandbox, limits, source)
    assert result.status == "forbidden" and len(result.violations) == MAX_VIOLATIONS, result.error
    assert result.error.endswith("later event lines unread)") and result.seconds < limits.wall_seconds / 3
    assert len(repr(result)) < 2 * limits.captured_bytes + 4096


def test_an_event_line_trickled_a_byte_at_a_time_costs_the_trainer_little_cpu(sandbox, limits):
    """Each read used to re-split the whole unfinished line, and each byte woke the reader: ~3.6 s of the trainer's
    CPU (the GIL held) for one run. The line never ends before its load report (an untagged line ends the run at
    once): the run ends at the wall clock, at that report, or once the line is longer than an answer may be."""
    source = ("import os, sys, time\nfd, end = int(sys.orig_argv[-1]), time.monotonic() + 2.5\n"
              "while time.monotonic() < end:\n    os.write(fd, b'y')\n")
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = attack(sandbox, dataclasses.replace(limits, wall_seconds=3, file_size_mb=64), source)
    after = resource.getrusage(resource.RUSAGE_SELF)
    spent = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    assert result.status in ("timeout", "no_verdict", "output_limit") and spent < 0.8, (spent, result)


def test_forged_answer_lines_past_the_calls_asked_end_the_run_unparsed(sandbox, limits):
    """Every tagged line used to be parsed, refusals aside: ~7.8 MB of short forged answers a run (here 20,000 lines). An honest child
    writes its load report, an answer per call and a few refusals; more is a protocol error."""
    source = ("import sys\nframe = sys._getframe()\nwhile frame and 'job' not in frame.f_locals:\n"
              "    frame = frame.f_back\njob, out = frame.f_locals['job'], frame.f_locals['channel']\n"
              "out.write((job['tag'] + '{\"i\": -1}\\n') * 20_000)\nout.flush()\n"
              f"{CORRECT_ADD}")
    result = attack(sandbox, limits, source)
    assert result.status == "no_verdict" and "protocol error" in result.error, result
    assert run_tests(CORRECT_ADD, ADD_TESTS * 30, sandbox, limits).status == "passed"


# --- leftovers and innocent code --------------------------------------------------------------------------------

def test_files_cleanup_cannot_delete_leave_nothing_on_the_host(sandbox, limits):
    before = set(os.listdir("/tmp"))
    source = ("import os, fcntl, struct\nos.makedirs('locked/deep')\nopen('locked/deep/f', 'w').write('x')\n"
              "fd = os.open('locked', os.O_RDONLY)\nos.chmod('locked/deep', 0)\nos.chmod('locked', 0)\ntry:\n"
              "    fcntl.ioctl(fd, 0x40086602, struct.pack('l', 0x10))\nexcept OSError:\n    pass\n"  # chattr +i
              + CORRECT_ADD)
    result = run_tests(source, ADD_TESTS, sandbox, limits)
    assert result.status == "passed"  # harmless: its tmpfs lives only in its own mount namespace
    assert {name for name in set(os.listdir("/tmp")) - before if "sandbox" in name} == set()


def test_innocent_code_passes_tempfile_own_files_threads_unix_sockets_copy2(sandbox, limits):
    """Threads (a pool of 8 too), Unix socket pairs, file locks (sqlite) and POSIX semaphores are allowed;
    ``sysinfo`` is refused (EPERM), not killed."""
    source = (
        "import tempfile, threading, shutil, os, socket, ctypes\nfrom concurrent.futures import ThreadPoolExecutor\n"
        "with tempfile.NamedTemporaryFile('w', delete=False) as handle:\n    handle.write('4')\n"
        "shutil.copy2(handle.name, 'copy.txt')\nOFFSET = int(open('copy.txt').read()) - 4\n"
        "thread = threading.Thread(target=print, args=('thread',))\nthread.start()\nthread.join()\n"
        "assert list(ThreadPoolExecutor(8).map(abs, range(-8, 0))) == list(range(8, 0, -1))\n"
        "left, right = socket.socketpair()\nleft.sendall(b'x')\nassert right.recv(1) == b'x'\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.sysinfo(ctypes.create_string_buffer(256)) == -1 and ctypes.get_errno() == 1\n"
        "import sqlite3\nwith sqlite3.connect('rows.db') as db:\n    db.execute('create table t (x)')\n"
        "import multiprocessing\nwith multiprocessing.Lock():\n    pass\n"
        "def add(a, b):\n    return a + b + OFFSET\n"
    )
    result = run_tests(source, ADD_TESTS, sandbox, limits)
    assert result.status == "passed", result
    assert result.stdout == "thread\n"


def test_innocent_code_returns_and_takes_ints_of_any_size(sandbox, limits):
    """Past 4300 decimal digits an int cannot be JSON text: it travels as hexadecimal, both ways."""
    tests = ["import math\nassert add(math.factorial(2000), 0) == math.factorial(2000)",
             "assert add(-10 ** 5000, 1) == 1 - 10 ** 5000", "assert add(2 ** 63, 2 ** 63) == 2 ** 64"]
    result = run_tests(CORRECT_ADD, tests, sandbox, limits)
    assert result.status == "passed", result


def test_innocent_code_starts_as_many_threads_as_the_process_limit_allows(sandbox, limits):
    """Thread stacks are small enough that ``processes`` binds before ``memory_mb`` (its init and main thread
    count among the processes)."""
    wanted = limits.processes - 4
    source = ("import threading\nstop = threading.Event()\nthreads = [threading.Thread(target=stop.wait) "
              f"for _ in range({wanted})]\nfor thread in threads:\n    thread.start()\nstop.set()\n{CORRECT_ADD}")
    result = run_tests(source, ADD_TESTS, sandbox, limits)
    assert result.status == "passed", result


ZOMBIE_COUNT = """
import ctypes, os, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come here, as to a container's PID 1
from tasks.sandbox import SandboxLimits, run_tests
from tasks.sandbox_bwrap import BwrapSandbox
sandbox, limits = BwrapSandbox(), SandboxLimits(wall_seconds=2)
for source in ["def add(a, b):\\n    return a + b", "import time\\ntime.sleep(30)"]:
    run_tests(source, ["assert add(1, 2) == 3"], sandbox, limits)
time.sleep(0.3)
mine = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    except OSError:
        continue
    if int(fields[1]) == os.getpid():
        mine.append(fields[0])
print(mine.count("Z"))
"""


def test_a_trainer_that_reaps_orphans_is_left_no_zombie(sandbox):
    """A trainer that is PID 1 of its container (here: a subreaper) collects no unreaped process per run, whether
    the run ends by itself or at the wall clock."""
    counted = subprocess.run([sys.executable, "-c", ZOMBIE_COUNT], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert counted.stdout == "0\n", counted.stderr
