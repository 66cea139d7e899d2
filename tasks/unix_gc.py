"""Make the kernel collect Unix sockets left in flight in a cycle, so that a finished run frees what they hold.

A run can put a file (say, one on its private tmpfs) in flight over ``SCM_RIGHTS`` inside a cycle of
Unix sockets (a socket in its own receive queue) and close them: nothing references the cycle but
itself, and only the kernel's Unix-socket garbage collector frees it, with the file, the detached
tmpfs and its pages. That collector runs when a Unix socket is released while descriptors are in
flight, which the cycle's own closing does not do; unprompted, the memory would stay until some other
process on the host passes a descriptor. So after each run this side prompts it.
"""

from __future__ import annotations

import array
import socket


def collect_unix_garbage() -> None:
    """Prompt the collector: put one end of a throwaway socket pair in flight in its own queue (a cycle of our own)
    and close both ends; releasing the first while the second is in flight runs it, and it frees both cycles."""
    sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sender.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [receiver.fileno()]))])
    finally:
        receiver.close()
        sender.close()
