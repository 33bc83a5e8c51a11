"""The skeleton's transports: what trunkline's hops are made of, and nothing else.

Written from the mechanism, not from trunkline's code, so that the skeleton stays
the same reference while the daemon changes: nng sockets driven from the trio
loop through their readiness descriptors (`recv_fd` turns readable when a
message is queued, `send_fd` when a send can go) with nng's non-blocking calls,
and a socket pair carrying a 4-byte big-endian length, then msgpack.
"""

from __future__ import annotations

import socket
import struct

import pynng
import trio
from pynng._nng import ffi, lib

_HEAD = struct.Struct(">I")
_ALLOC_NONBLOCK = lib.NNG_FLAG_ALLOC | lib.NNG_FLAG_NONBLOCK
#: The topic separator of an event message: `client id \x00 msgpack event`.
SEP = b"\x00"


def try_send(sock: pynng.Socket, data: bytes) -> bool:
    """nng's non-blocking send: False when the socket cannot take it now."""
    err = lib.nng_send(sock.socket, data, len(data), lib.NNG_FLAG_NONBLOCK)
    if err == lib.NNG_EAGAIN:
        return False
    pynng.check_err(err)
    return True


async def send(sock: pynng.Socket, data: bytes) -> None:
    while not try_send(sock, data):
        await trio.lowlevel.wait_readable(sock.send_fd)


class Receiver:
    """Messages off a socket without contexts: nng's non-blocking receive, and the
    loop waiting on `recv_fd` when nothing is queued."""

    __slots__ = ("_data", "_handle", "_size", "fd")

    def __init__(self, sock: pynng.Socket) -> None:
        self.fd = sock.recv_fd
        self._handle = sock.socket
        self._data = ffi.new("char **")
        self._size = ffi.new("size_t *")

    def ready(self) -> bytes | None:
        err = lib.nng_recv(self._handle, self._data, self._size, _ALLOC_NONBLOCK)
        if err == lib.NNG_EAGAIN:
            return None
        pynng.check_err(err)
        data, size = self._data[0], self._size[0]
        out: bytes = ffi.unpack(data, size)
        lib.nng_free(data, size)
        return out

    async def recv(self) -> bytes:
        while True:
            data = self.ready()
            if data is not None:
                return data
            await trio.lowlevel.wait_readable(self.fd)


class RawRep:
    """A raw Rep0: each request comes with its routing header, and its reply goes
    back with that header, so one socket answers every connection."""

    def __init__(self, url: str) -> None:
        self.sock = pynng.Rep0(opener=lib.nng_rep0_open_raw)
        self.sock.listen(url)
        self.fd = self.sock.recv_fd
        self._send_fd = self.sock.send_fd
        self._handle = self.sock.socket
        self._msg_p = ffi.new("nng_msg **")

    async def recv(self) -> tuple[bytes, bytes]:
        """(body, routing header) of the next request."""
        while True:
            err = lib.nng_recvmsg(self._handle, self._msg_p, lib.NNG_FLAG_NONBLOCK)
            if err == lib.NNG_EAGAIN:
                await trio.lowlevel.wait_readable(self.fd)
                continue
            pynng.check_err(err)
            msg = self._msg_p[0]
            body: bytes = ffi.unpack(ffi.cast("char *", lib.nng_msg_body(msg)), lib.nng_msg_len(msg))
            header: bytes = ffi.unpack(ffi.cast("char *", lib.nng_msg_header(msg)), lib.nng_msg_header_len(msg))
            lib.nng_msg_free(msg)
            return body, header

    async def reply(self, header: bytes, body: bytes) -> None:
        while True:
            msg_p = ffi.new("nng_msg **")
            pynng.check_err(lib.nng_msg_alloc(msg_p, 0))
            msg = msg_p[0]
            err = lib.nng_msg_header_append(msg, header, len(header)) or lib.nng_msg_append(msg, body, len(body))
            if not err:
                err = lib.nng_sendmsg(self._handle, msg, lib.NNG_FLAG_NONBLOCK)
                if not err:
                    return
            lib.nng_msg_free(msg)
            if err != lib.NNG_EAGAIN:
                pynng.check_err(err)
            await trio.lowlevel.wait_readable(self._send_fd)

    def close(self) -> None:
        self.sock.close()


def frame(payload: bytes) -> bytes:
    return _HEAD.pack(len(payload)) + payload


class Link:
    """One end of the supervisor <-> worker socket pair, non-blocking, driven by trio."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._buf = bytearray()
        #: Held only while a frame is partly written, so that no other frame cuts into it.
        self._writing = trio.Lock()

    async def send(self, payload: bytes) -> None:
        data = frame(payload)
        if not self._writing.locked():
            try:
                sent = self.sock.send(data)
            except BlockingIOError:
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        async with self._writing:
            view = memoryview(data)
            while view:
                try:
                    view = view[self.sock.send(view) :]
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(self.sock)

    async def receive(self) -> list[bytes]:
        """The next whole messages (at least one); EOFError when the other end closed."""
        buf = self._buf
        while True:
            out: list[bytes] = []
            pos = 0
            while len(buf) - pos >= 4:
                (size,) = _HEAD.unpack_from(buf, pos)
                if len(buf) - pos - 4 < size:
                    break
                out.append(bytes(buf[pos + 4 : pos + 4 + size]))
                pos += 4 + size
            if pos:
                del buf[:pos]
            if out:
                return out
            try:
                data = self.sock.recv(256 * 1024)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)
                continue
            if not data:
                raise EOFError("the link closed")
            buf += data


__all__ = ["SEP", "Link", "RawRep", "Receiver", "frame", "send", "try_send"]
