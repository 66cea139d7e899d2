"""The seccomp filter the ``bwrap`` sandbox installs: a classic BPF program built here, in pure Python.

Why here and not a library: the program is a straight list of comparisons (check the
architecture, load the system call number, compare, return), and building it needs no native
binding. bubblewrap loads it with ``--seccomp FD`` before it starts the interpreter, so every
process of the sandbox runs under it.

What it does, on x86-64 and AArch64:

- kills the process (``SECCOMP_RET_KILL_PROCESS``, seen by the parent as SIGSYS: the run is
  ``forbidden``) on system calls that only an escape or an attack on other processes needs:
  device nodes and FIFOs (``mknod``), tracing and other processes' memory, pid file descriptors,
  ``prlimit`` on another process, mounts, namespaces (``unshare``, ``setns``, ``clone`` with a
  namespace flag), keyrings, kernel modules, BPF, perf, ``userfaultfd``, ``io_uring`` (its
  operations bypass seccomp), the clock, swap, reboot, file handles;
- kills it on creating a process: ``fork``, ``vfork``, ``clone`` unless it makes a thread sharing memory, signal
  handlers and the fd table (``CLONE_VM``, ``CLONE_SIGHAND``, ``CLONE_THREAD``, ``CLONE_FILES``: a thread of its own
  fd table would open ``open_files`` more). Threads stay allowed, as many as the process limit lets the sandbox
  make. The memory and CPU limits are per process: a process of its own would escape both;
- kills it on ``memfd_create`` (memory outside the tmpfs's size), System V IPC (shared memory, semaphores and
  message queues: memory and kernel objects outside ``RLIMIT_AS``) and POSIX message queues (a per-user quota),
  Linux AIO (``io_setup`` reserves the host-wide ``fs.aio-max-nr``), ``inotify_init`` and ``fanotify_init`` (per-user
  quotas, shared with every sandbox of the trainer; fanotify watches host processes' access to bound files) and
  ``socket`` and ``socketpair`` of any family but ``AF_UNIX`` (``AF_VSOCK`` reaches a virtual machine's host, past
  the network namespace);
- answers ``EPERM`` to extended attributes (``shutil.copy2`` tries them and carries on), to
  ``sysinfo`` (the host's process count and memory), to ``fcntl(F_SETLEASE)`` (a lease on a host file
  bound into the sandbox makes the host's writers of that file wait), to ``fcntl(F_NOTIFY)`` (dnotify: a signal
  on host processes' access to bound directories) and to ``setsockopt`` of the ``SOL_SOCKET`` buffer sizes
  (``SO_SNDBUF``, ``SO_RCVBUF`` and their ``FORCE`` forms: socket buffers are kernel memory past ``memory_mb``),
  and to ``splice``, ``tee``, ``vmsplice``, ``sendfile`` and ``copy_file_range`` (each can hold a pipe's lock while
  it waits, and the trainer's read of that pipe would sleep past any wall clock), and to ``fadvise64`` (dropping a
  bound host file's pages from the host's cache), to ``readahead``, ``madvise(MADV_WILLNEED)``, ``process_madvise`` and
  ``preadv2`` with
  ``RWF_NOWAIT`` (each queues reads of a bound host file behind the run's read throttle and returns), to ``sync`` and
  ``syncfs``, and to ``O_DIRECT`` in ``open``, ``openat`` and ``fcntl(F_SETFL)`` (:data:`O_DIRECT`);
  and to ``prctl(PR_SET_PDEATHSIG)`` (bubblewrap's ``--die-with-parent`` is that signal: cleared, the code would
  outlive a killed trainer);
  ``ENOSYS`` to ``clone3`` and ``openat2`` (whose flags a filter cannot read: the C library falls back to ``clone``
  and ``openat``);
- kills a process of any other architecture (32-bit or x32 system calls) outright.

A second filter (:func:`build_exec_seal`), installed by the child program before the code runs, kills the process on
``execve`` and ``execveat`` and refuses ``sched_setaffinity``.
"""

from __future__ import annotations

import errno
import platform
import struct

# <linux/filter.h>, <linux/seccomp.h>, <linux/audit.h>
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_ALU_AND_K = 0x54
_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
EPERM = RET_ERRNO | errno.EPERM
# struct seccomp_data (little-endian)
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0, _OFFSET_ARG1, _OFFSET_ARG2, _OFFSET_ARG5 = 0, 4, 16, 24, 32, 56
_X32_BIT = 0x40000000
CLONE_NAMESPACE_FLAGS = 0x7E020000 | 0x00000080  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET + NEWTIME
CLONE_SHARED_THREAD = 0x00000100 | 0x00000400 | 0x00000800 | 0x00010000  # VM, FILES, SIGHAND, THREAD
AF_UNIX = 1
PR_SET_PDEATHSIG = 1
F_SETLEASE, F_NOTIFY, F_SETPIPE_SZ = 1024, 1026, 1031
SOL_SOCKET = 1
SOCKET_BUFFER_OPTIONS = (7, 8, 32, 33)  # SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE

KILLED = (
    "mknod", "mknodat", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_send_signal",
    "pidfd_getfd", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "unshare", "setns", "keyctl", "add_key", "request_key", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "swapon", "swapoff", "reboot", "acct", "quotactl",
    "quotactl_fd", "open_by_handle_at", "name_to_handle_at", "syslog", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "personality", "lookup_dcookie", "vhangup",
    "fork", "vfork", "memfd_create", "memfd_secret", "inotify_init", "inotify_init1", "fanotify_init", "fanotify_mark",
    "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv",
    "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "io_setup", "io_submit", "io_getevents", "io_pgetevents", "io_destroy", "io_cancel",
)
REFUSED = ("setxattr", "lsetxattr", "fsetxattr", "setxattrat", "sysinfo",
           "splice", "tee", "vmsplice", "sendfile", "copy_file_range", "fadvise64", "readahead", "sync", "syncfs",
           "process_madvise", "sendmsg", "sendmmsg")
"""Answered EPERM rather than killed: innocent library code tries them and handles the refusal (``sysinfo`` would
tell the host's process count and memory: the C library's ``sysconf`` reports the refusal as unknown; ``shutil``
falls back to read and write when ``sendfile`` or ``copy_file_range`` is refused). ``splice``, ``tee``, ``vmsplice``,
``sendfile`` and ``copy_file_range`` would hold a pipe's lock while they wait on their other end: the trainer's read
of stdout, stderr or the events pipe (or its write to stdin) would then sleep uninterruptibly, past its wall clock.
(``sendfile64`` is the same call, ``sendfile``, on x86-64 and AArch64.) ``fadvise64`` with ``POSIX_FADV_DONTNEED`` on
a host file bound read-only into the sandbox (the trainer's Python installation) drops its pages from the host's
cache. ``readahead`` (and ``madvise(MADV_WILLNEED)``, refused on its own, and ``process_madvise``, which gives any
advice to the calling thread's own memory through a sentinel pidfd) queues reads of a bound host file behind
the run's I/O throttle while their pages stay locked: the host's readers of that file wait behind them. ``sync`` and
``syncfs`` wait, uninterruptibly, for the host's whole write-back (a twelfth round's ``sync`` loop kept the process
alive 10 s past its run, and past a killed trainer, while the host flushed 150 MB to slow storage). ``sendmsg`` and
``sendmmsg`` are the only calls that pass file descriptors (``SCM_RIGHTS``): a seventeenth round sent the read end of a
pipe whose lock its writer held over cold page faults down its stdout socket, and the trainer's read, dropping the
last reference to it, waited on that lock 10-40 s past the wall clock (``send`` and ``sendall`` are ``sendto``)."""
MADV_WILLNEED = 3
RWF_NOWAIT = 0x8
"""``preadv2``'s flag that starts the read-ahead of uncached pages and returns at once: refused as ``readahead`` is (a
thirteenth round queued 56,000 page reads so in 0.5 s; after a killed trainer a host read of the file took 21 s)."""
O_DIRECT = {"x86_64": 0o40000, "aarch64": 0o200000}
"""``O_DIRECT`` (it differs by architecture): refused in ``open``, ``openat`` and ``fcntl(F_SETFL)``. A direct read
waits for its disk I/O uninterruptibly, and behind the run's I/O throttle (:mod:`tasks.sandbox_cgroup`) a thread's
2 GB read kept the process alive, unkillable, minutes after its run; buffered reads wait killably."""
F_SETFL = 4

# name -> (x86-64, AArch64); None where the architecture has no such call
NUMBERS = {
    "mknod": (133, None), "mknodat": (259, 33), "ptrace": (101, 117), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "pidfd_open": (434, 434), "pidfd_send_signal": (424, 424),
    "pidfd_getfd": (438, 438), "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41),
    "chroot": (161, 51), "move_mount": (429, 429), "open_tree": (428, 428), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "unshare": (272, 97), "setns": (308, 268), "keyctl": (250, 219), "add_key": (248, 217),
    "request_key": (249, 218), "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "swapon": (167, 224), "swapoff": (168, 225),
    "reboot": (169, 142), "acct": (163, 89), "quotactl": (179, 60), "quotactl_fd": (443, 443),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264), "syslog": (103, 116),
    "settimeofday": (164, 170), "clock_settime": (227, 112), "clock_adjtime": (305, 266), "adjtimex": (159, 171),
    "personality": (135, 92), "lookup_dcookie": (212, 18), "vhangup": (153, 58),
    "setxattr": (188, 5), "lsetxattr": (189, 6), "fsetxattr": (190, 7), "setxattrat": (463, 463),
    "prlimit64": (302, 261), "clone": (56, 220), "clone3": (435, 435),
    "fork": (57, None), "vfork": (58, None), "memfd_create": (319, 279), "memfd_secret": (447, 447),
    "inotify_init": (253, None), "inotify_init1": (294, 26), "sysinfo": (99, 179), "socket": (41, 198),
    "socketpair": (53, 199), "setsockopt": (54, 208),
    "fcntl": (72, 25), "fanotify_init": (300, 262), "fanotify_mark": (301, 263),
    "shmget": (29, 194), "shmat": (30, 196), "shmctl": (31, 195), "shmdt": (67, 197), "semget": (64, 190),
    "semop": (65, 193), "semtimedop": (220, 192), "semctl": (66, 191), "msgget": (68, 186), "msgsnd": (69, 189),
    "msgrcv": (70, 188), "msgctl": (71, 187), "mq_open": (240, 180), "mq_unlink": (241, 181),
    "mq_timedsend": (242, 182), "mq_timedreceive": (243, 183), "mq_notify": (244, 184), "mq_getsetattr": (245, 185),
    "io_setup": (206, 0), "io_submit": (209, 2), "io_getevents": (208, 4), "io_pgetevents": (333, 292),
    "io_destroy": (207, 1), "io_cancel": (210, 3),
    "splice": (275, 76), "tee": (276, 77), "vmsplice": (278, 75), "sendfile": (40, 71), "copy_file_range": (326, 285),
    "fadvise64": (221, 223), "prctl": (157, 167), "readahead": (187, 213), "open": (2, None), "openat": (257, 56),
    "openat2": (437, 437), "sync": (162, 81), "syncfs": (306, 267), "madvise": (28, 233), "preadv2": (327, 286),
    "process_madvise": (440, 440), "sendmsg": (46, 211), "sendmmsg": (307, 269),
}
EXEC_NUMBERS = {"execve": (59, 221), "execveat": (322, 281)}
SCHED_SETAFFINITY = (203, 122)
_ARCHES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}  # column in NUMBERS, AUDIT_ARCH_*


def _op(code: int, k: int = 0, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _on(number: int, block: list[bytes]) -> list[bytes]:
    """``block`` for system call ``number`` (in the accumulator); any other call skips it."""
    return [_op(_JEQ_K, number, jf=len(block)), *block]


def _match(offset: int, values: tuple[int, ...], hit: int, miss: int) -> list[bytes]:
    """Return ``hit`` when the 32-bit argument at ``offset`` is one of ``values``, else ``miss``."""
    count = len(values)
    tests = [_op(_JEQ_K, value, jt=count - index) for index, value in enumerate(values)]
    return [_op(_LD_W_ABS, offset), *tests, _op(_RET_K, miss), _op(_RET_K, hit)]


def _thread_clone_only() -> list[bytes]:
    """``clone``: allowed for a thread sharing memory, signal handlers and the fd table, with no namespace flag;
    anything else is killed (a thread of its own fd table would get ``open_files`` afresh)."""
    return [
        _op(_LD_W_ABS, _OFFSET_ARG0),
        _op(_JSET_K, CLONE_NAMESPACE_FLAGS, jt=3),
        _op(_ALU_AND_K, CLONE_SHARED_THREAD),
        _op(_JEQ_K, CLONE_SHARED_THREAD, jf=1),
        _op(_RET_K, RET_ALLOW),
        _op(_RET_K, RET_KILL_PROCESS),
    ]


def _socket_buffers_refused() -> list[bytes]:
    """``setsockopt``: EPERM to the ``SOL_SOCKET`` buffer sizes (kernel memory past ``memory_mb``), else allowed."""
    return [
        _op(_LD_W_ABS, _OFFSET_ARG1),
        _op(_JEQ_K, SOL_SOCKET, jt=1),
        _op(_RET_K, RET_ALLOW),
        *_match(_OFFSET_ARG2, SOCKET_BUFFER_OPTIONS, hit=EPERM, miss=RET_ALLOW),
    ]


def _flag_refused(offset: int, flag: int) -> list[bytes]:
    """EPERM when the 32-bit argument at ``offset`` has ``flag`` set, else allowed."""
    return [_op(_LD_W_ABS, offset), _op(_JSET_K, flag, jt=1), _op(_RET_K, RET_ALLOW), _op(_RET_K, EPERM)]


def _fcntl_refused(o_direct: int) -> list[bytes]:
    """``fcntl``: EPERM to ``F_SETLEASE``, ``F_NOTIFY``, ``F_SETPIPE_SZ`` (a larger stdout pipe lets one write hold the
    pipe's lock, and the trainer's read, over more page faults) and ``F_SETFL`` with ``O_DIRECT``, else allowed."""
    return [
        _op(_LD_W_ABS, _OFFSET_ARG1),
        _op(_JEQ_K, F_SETLEASE, jt=6),
        _op(_JEQ_K, F_NOTIFY, jt=5),
        _op(_JEQ_K, F_SETPIPE_SZ, jt=4),
        _op(_JEQ_K, F_SETFL, jf=2),
        _op(_LD_W_ABS, _OFFSET_ARG2),
        _op(_JSET_K, o_direct, jt=1),
        _op(_RET_K, RET_ALLOW),
        _op(_RET_K, EPERM),
    ]


def build_exec_seal(machine: str | None = None) -> bytes:
    """A second filter, which the child installs once it has started, before the code runs: ``execve`` and
    ``execveat`` kill the process. A thread's exec would take the process over without bubblewrap's parent-death
    signal (a new thread has none), and the code would outlive a killed trainer; code that may not fork has no
    use for exec (bubblewrap needs it to start the interpreter, hence not in :func:`build_filter`). It also answers
    ``EPERM`` to ``sched_setaffinity``: the child has chosen the CPUs the code sees."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise RuntimeError(f"no seccomp filter for the {machine} architecture (known: {', '.join(_ARCHES)})")
    column, audit_arch = _ARCHES[machine]
    return b"".join([
        _op(_LD_W_ABS, _OFFSET_ARCH),
        _op(_JEQ_K, audit_arch, jt=1),
        _op(_RET_K, RET_KILL_PROCESS),
        _op(_LD_W_ABS, _OFFSET_NR),
        _op(_JEQ_K, SCHED_SETAFFINITY[column], jf=1),
        _op(_RET_K, EPERM),
        *_match(_OFFSET_NR, tuple(EXEC_NUMBERS[name][column] for name in EXEC_NUMBERS), hit=RET_KILL_PROCESS,
                miss=RET_ALLOW),
    ])


def supported(machine: str | None = None) -> bool:
    """Whether a filter can be built for ``machine`` (default: this one)."""
    return (machine or platform.machine()) in _ARCHES


def build_filter(machine: str | None = None) -> bytes:
    """The BPF program (``struct sock_filter[]`` bytes) for ``machine`` (default: this one)."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise RuntimeError(f"no seccomp filter for the {machine} architecture (known: {', '.join(_ARCHES)})")
    column, audit_arch = _ARCHES[machine]
    number = {name: numbers[column] for name, numbers in NUMBERS.items() if numbers[column] is not None}
    program = [
        _op(_LD_W_ABS, _OFFSET_ARCH),
        _op(_JEQ_K, audit_arch, jt=1),
        _op(_RET_K, RET_KILL_PROCESS),
        _op(_LD_W_ABS, _OFFSET_NR),
    ]
    if machine == "x86_64":  # x32 system calls share the architecture value
        program += [_op(_JGE_K, _X32_BIT, jf=1), _op(_RET_K, RET_KILL_PROCESS)]
    for name in KILLED:
        if name in number:
            program += [_op(_JEQ_K, number[name], jf=1), _op(_RET_K, RET_KILL_PROCESS)]
    for name in REFUSED:
        program += [_op(_JEQ_K, number[name], jf=1), _op(_RET_K, EPERM)]
    for name in ("clone3", "openat2"):  # their flags are in a struct a filter cannot read: the C library falls back
        program += [_op(_JEQ_K, number[name], jf=1), _op(_RET_K, RET_ERRNO | errno.ENOSYS)]
    if "open" in number:
        program += _on(number["open"], _flag_refused(_OFFSET_ARG1, O_DIRECT[machine]))
    program += _on(number["openat"], _flag_refused(_OFFSET_ARG2, O_DIRECT[machine]))
    program += _on(number["clone"], _thread_clone_only())
    for name in ("socket", "socketpair"):
        program += _on(number[name], _match(_OFFSET_ARG0, (AF_UNIX,), hit=RET_ALLOW, miss=RET_KILL_PROCESS))
    program += _on(number["prlimit64"], _match(_OFFSET_ARG0, (0,), hit=RET_ALLOW, miss=RET_KILL_PROCESS))
    program += _on(number["fcntl"], _fcntl_refused(O_DIRECT[machine]))
    program += _on(number["madvise"], _match(_OFFSET_ARG2, (MADV_WILLNEED,), hit=EPERM, miss=RET_ALLOW))
    program += _on(number["preadv2"], _flag_refused(_OFFSET_ARG5, RWF_NOWAIT))
    program += _on(number["setsockopt"], _socket_buffers_refused())
    program += _on(number["prctl"], _match(_OFFSET_ARG0, (PR_SET_PDEATHSIG,), hit=EPERM, miss=RET_ALLOW))
    program += [_op(_RET_K, RET_ALLOW)]
    return b"".join(program)
