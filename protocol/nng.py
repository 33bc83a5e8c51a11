"""Every pynng detail in one place: the Python client's sockets (Req0 for control,
Sub0 for events). The daemon speaks the same wire with its own code (`sp_server`).

Measured on this stack (DESIGN §9): pynng's `await asend()`/`arecv()` cost a
thread hop each, so the fast path tries the non-blocking call first and only
awaits when the socket is not ready.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pynng
from pynng._nng import ffi, lib

from .codec import DecodeError

EVENT_BUFFER = 8192  # nng's maximum; with the defaults (16/128) a burst loses most events
IPC_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL
_ALLOC_NONBLOCK = lib.NNG_FLAG_ALLOC | lib.NNG_FLAG_NONBLOCK

TryAgain = pynng.TryAgain
Closed = pynng.Closed
ConnectionRefused = pynng.ConnectionRefused
NNGException = pynng.NNGException


def ipc_path(url: str) -> Path | None:
    return Path(url[len("ipc://") :]) if url.startswith("ipc://") else None


def check_ipc_url(url: str) -> None:
    path = ipc_path(url)
    if path is not None and len(str(path).encode()) > IPC_PATH_MAX:
        raise ValueError(f"ipc path too long ({len(str(path))} bytes, max {IPC_PATH_MAX}): {path}")


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
    "Receiver",
    "requester",
    "subscriber",
    "try_send",
]
