"""The supervisor <-> worker link: one socket pair per worker process.

The supervisor makes the pair just before it starts a worker and hands the
child its end as an inherited descriptor (`fd:N` in the worker's settings), so
the link has no file on disk, no listener and no handshake, and each worker
process has its own: nothing queued for a worker that died can reach its
successor. Messages are framed as on nng's ipc transport (`sp_wire`). Either
side sees the other exit as the end of the stream, at once.
"""

from __future__ import annotations

import socket

import trio

from .sp_conn import Conn

#: Kernel buffer per direction: a burst of events rarely has to wait in user space.
BUFFER_BYTES = 1024 * 1024


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(the supervisor's end, the worker's end); neither is inherited by accident
    (Python makes them close-on-exec; `pass_fds` hands the worker its end)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for sock in (ours, theirs):
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, opt, BUFFER_BYTES)
            except OSError:
                pass  # the system's cap applies
    return ours, theirs


def inherited(spec: str) -> socket.socket:
    """The worker's end, from its settings (`fd:N`)."""
    kind, _, number = spec.partition(":")
    if kind != "fd" or not number.isdigit():
        raise ValueError(f"not a link descriptor: {spec!r}")
    return socket.socket(fileno=int(number))


def conn(sock: socket.socket, nursery: trio.Nursery) -> Conn:
    """A link end as a connection: ipc framing, no size limit (both ends are ours)."""
    return Conn(sock, ipc=True, nursery=nursery)
