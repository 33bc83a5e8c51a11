"""Every pynng detail in one place, for the supervisor, the workers and the client.

Measured on this stack (DESIGN §9): pynng's `await asend()`/`arecv()` cost a
thread hop each, so the fast path tries the non-blocking call first and only
awaits when the socket is not ready. A cancelled `asend` leaks its message,
so sends are shielded from cancellation: they finish or the socket closes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pynng
from pynng._nng import ffi, lib

from .codec import DecodeError

EVENT_BUFFER = 8192  # nng's maximum; with the defaults (16/128) a burst loses most events
LINK_BUFFER = 8192
REPLY_BUFFER = 1024  # replies waiting for nng to route them to their clients
IPC_PATH_MAX = 107
_ALLOC_NONBLOCK = lib.NNG_FLAG_ALLOC | lib.NNG_FLAG_NONBLOCK  # sun_path is 108 bytes with the terminating NUL

TryAgain = pynng.TryAgain
Closed = pynng.Closed
AddressInUse = pynng.AddressInUse
ConnectionRefused = pynng.ConnectionRefused
Timeout = pynng.Timeout
NNGException = pynng.NNGException
Message = pynng.Message


def ipc_path(url: str) -> Path | None:
    return Path(url[len("ipc://") :]) if url.startswith("ipc://") else None


def check_ipc_url(url: str) -> None:
    path = ipc_path(url)
    if path is not None and len(str(path).encode()) > IPC_PATH_MAX:
        raise ValueError(f"ipc path too long ({len(str(path))} bytes, max {IPC_PATH_MAX}): {path}")


def secure_ipc(url: str) -> None:
    """Make an ipc socket file readable and writable by its owner only."""
    path = ipc_path(url)
    if path is not None and path.exists():
        os.chmod(path, 0o600)


async def send(sock: Any, data: bytes) -> None:
    """Send without blocking the event loop, never abandoning a message half-sent."""
    if try_send(sock, data):
        return
    with anyio.CancelScope(shield=True):
        await sock.asend(data)


def try_send(sock: Any, data: bytes) -> bool:
    """Send if the socket can take it now; never waits. (nng directly: pynng's `send`
    checks its argument and raises an exception for a full queue, which costs more
    than the send on the hot paths.)"""
    err = lib.nng_send(sock.socket, data, len(data), lib.NNG_FLAG_NONBLOCK)
    if not err:
        return True
    if err == lib.NNG_EAGAIN:
        return False
    pynng.check_err(err)
    return False


class Receiver:
    """Receives from a socket by waiting on nng's readiness descriptor in the event
    loop itself. pynng's `arecv` hops through an nng thread and a callback into the
    loop for every message; waiting on the descriptor halves a round trip (measured
    289 -> 157 us over ipc) and its CPU. Only for sockets used without contexts.

    Receives call nng directly with buffers kept from call to call: pynng's `recv`
    allocates two and raises an exception when nothing is queued, which is most of
    the cost of taking a small message."""

    __slots__ = ("sock", "fd", "_handle", "_data", "_size")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.fd = sock.recv_fd
        self._handle = sock.socket
        self._data = ffi.new("char **")
        self._size = ffi.new("size_t *")

    def ready(self) -> bytes | None:
        """A message if one is queued, else None."""
        err = lib.nng_recv(self._handle, self._data, self._size, _ALLOC_NONBLOCK)
        if err:
            if err == lib.NNG_EAGAIN:
                return None
            pynng.check_err(err)
        data, size = self._data[0], self._size[0]
        if not size:
            if data != ffi.NULL:
                lib.nng_free(data, size)
            return b""
        try:
            return ffi.unpack(data, size)  # type: ignore[no-any-return]
        finally:
            lib.nng_free(data, size)

    async def recv(self) -> bytes:
        while True:
            data = self.ready()
            if data is not None:
                return data
            await anyio.wait_readable(self.fd)


async def recv(sock: Any) -> bytes:
    """Receive the next message, taking the fast path when one is already queued."""
    try:
        return sock.recv(block=False)  # type: ignore[no-any-return]
    except pynng.TryAgain:
        return await sock.arecv()  # type: ignore[no-any-return]


def pair(url: str, *, listen: bool) -> pynng.Pair1:
    """The supervisor <-> worker link: the supervisor listens, the worker dials."""
    check_ipc_url(url)
    sock = pynng.Pair1(
        recv_buffer_size=LINK_BUFFER,
        send_buffer_size=LINK_BUFFER,
        reconnect_time_min=10,
        reconnect_time_max=200,
        recv_max_size=0,
    )
    if listen:
        sock.listen(url)
        secure_ipc(url)
    else:
        sock.dial(url, block=False)
    return sock


def publisher(url: str) -> pynng.Pub0:
    check_ipc_url(url)
    sock = pynng.Pub0(send_buffer_size=EVENT_BUFFER)
    sock.listen(url)
    secure_ipc(url)
    return sock


def publish(sock: pynng.Pub0, frame: bytes) -> bool:
    """Publish without ever blocking; False if nng refused (it drops for slow subscribers)."""
    return try_send(sock, frame)


def replier(url: str, max_size: int) -> Replier:
    return Replier(url, max_size)


class Replier:
    """The daemon's control socket: Rep0 in raw mode.

    A cooked Rep0 needs one nng context per outstanding request, and pynng receives on
    a context through an nng thread and a callback into the event loop; replying on it
    allocates an aio and waits on a condition variable. In raw mode the request's
    routing header comes with the message and goes back with the reply, so one socket
    serves every request, receives by waiting on its readiness descriptor, and can
    answer a slow request (`ready`, `count_tokens`) whenever it is done while the
    others go on. Measured on the control round trip: see docs/ARCHITECTURE.md.

    nng queues up to 64 replies per client connection behind the socket's own
    buffer and drops beyond that: only a client that sends requests on many
    contexts and stops reading its replies can lose one (its call then times out)."""

    def __init__(self, url: str, max_size: int, send_buffer: int = REPLY_BUFFER) -> None:
        check_ipc_url(url)
        self.sock = pynng.Rep0(opener=lib.nng_rep0_open_raw, recv_max_size=max_size, send_buffer_size=send_buffer)
        try:
            self.sock.listen(url)
        except BaseException:
            self.sock.close()
            raise
        secure_ipc(url)
        self.fd = self.sock.recv_fd
        self._handle = self.sock.socket
        self._msg_p = ffi.new("nng_msg **")

    def _take(self) -> tuple[bytes, bytes, int] | None:
        err = lib.nng_recvmsg(self._handle, self._msg_p, lib.NNG_FLAG_NONBLOCK)
        if err:
            if err == lib.NNG_EAGAIN:
                return None
            pynng.check_err(err)
        msg = self._msg_p[0]
        try:
            body = ffi.unpack(ffi.cast("char *", lib.nng_msg_body(msg)), lib.nng_msg_len(msg))
            header = ffi.unpack(ffi.cast("char *", lib.nng_msg_header(msg)), lib.nng_msg_header_len(msg))
            pipe = lib.nng_pipe_id(lib.nng_msg_get_pipe(msg))
        finally:
            lib.nng_msg_free(msg)
        return body, header, pipe

    async def recv(self) -> tuple[bytes, bytes, int]:
        """(request body, its routing header, the id of the pipe it came on)."""
        while True:
            got = self._take()
            if got is not None:
                return got
            await anyio.wait_readable(self.fd)

    def reply(self, header: bytes, body: bytes) -> bool:
        """Answer the request that came with `header`, if that can be done now. False
        when the client's pipe is still busy with an earlier reply: then `areply`.
        A reply to a client that has gone is dropped by nng (True)."""
        msg_p = ffi.new("nng_msg **")
        pynng.check_err(lib.nng_msg_alloc(msg_p, 0))
        msg = msg_p[0]
        err = lib.nng_msg_header_append(msg, header, len(header)) or lib.nng_msg_append(msg, body, len(body))
        if not err:
            err = lib.nng_sendmsg(self._handle, msg, lib.NNG_FLAG_NONBLOCK)
            if not err:
                return True
        lib.nng_msg_free(msg)
        if err in (lib.NNG_EAGAIN, lib.NNG_ETIMEDOUT):
            return False
        pynng.check_err(err)
        return True

    async def areply(self, header: bytes, body: bytes) -> None:
        """Answer once the client's pipe can take it (never abandoned half-sent)."""
        msg = pynng.Message(body)
        pynng.check_err(lib.nng_msg_header_append(msg._nng_msg, header, len(header)))
        with anyio.CancelScope(shield=True):
            await self.sock.asend_msg(msg)

    def add_post_pipe_remove_cb(self, cb: Any) -> None:
        self.sock.add_post_pipe_remove_cb(cb)

    def close(self) -> None:
        self.sock.close()


def requester(url: str) -> pynng.Req0:
    """A client's control socket. `resend_time=-1`: nng would otherwise resend an
    unanswered request after 60 s, to a restarted daemon too."""
    check_ipc_url(url)
    sock = pynng.Req0(resend_time=-1, reconnect_time_min=10, reconnect_time_max=500)
    sock.dial(url, block=True)
    return sock


def subscriber(url: str, topic: bytes) -> pynng.Sub0:
    check_ipc_url(url)
    sock = pynng.Sub0(recv_buffer_size=EVENT_BUFFER, reconnect_time_min=10, reconnect_time_max=500)
    sock.subscribe(topic)
    sock.dial(url, block=True)
    return sock


__all__ = [
    "DecodeError",
    "EVENT_BUFFER",
    "pair",
    "publisher",
    "publish",
    "replier",
    "requester",
    "subscriber",
    "send",
    "recv",
    "Receiver",
]
