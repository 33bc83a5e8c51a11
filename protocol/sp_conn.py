"""One stream socket carrying SP frames, driven by the trio event loop itself.

Sends go straight to the kernel (`send` on the non-blocking socket): nothing
waits, no thread is woken. What the kernel cannot take at once is queued, in
order, and written by a task when the socket becomes writable; the queue's
size is visible so that a caller can push back (the worker link) or drop (a
slow subscriber). Receives take whatever the kernel has and cut it into whole
messages (`sp_wire.FrameReader`).

Also here: listening on `ipc://` and `tcp://` URLs the way nng does, including
its check for a live listener on an ipc path.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from collections import deque
from collections.abc import Callable
from itertools import islice

import trio

from . import sp_wire
from .sp_wire import FrameReader, Oversize, WireError, split_url, tcp_address

RECV_SIZE = 256 * 1024
#: One receive buffer for every connection of the process (one thread, and a reader
#: copies out what it keeps before the next receive). `recv(RECV_SIZE)` allocated
#: 256 KiB per receive and shrank it, a pattern that grew the supervisor's heap by
#: 1.5 MiB a minute under steady load; this does not grow.
_RECV_BUFFER = bytearray(RECV_SIZE)
_RECV_VIEW = memoryview(_RECV_BUFFER)
#: Consecutive receives before a reader lets other tasks run.
BURST = 16
HANDSHAKE_TIMEOUT_S = 10.0


class AddressInUse(OSError):
    """Another live process listens on this endpoint."""


class Closed(Exception):
    """The connection is closed (by the peer, or here)."""


class Conn:
    """A connected socket speaking SP frames (ipc or tcp framing)."""

    __slots__ = ("sock", "id", "ipc", "reader", "_frame", "_out", "_out_bytes", "_writing", "_drained",
                 "closed", "_nursery", "_recv_burst", "on_drained")

    def __init__(self, sock: socket.socket, *, ipc: bool, nursery: trio.Nursery, conn_id: int = 0,
                 max_size: int = 0, expect: int | None = None) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.id = conn_id
        self.ipc = ipc
        self.reader = FrameReader(ipc=ipc, max_size=max_size, expect=expect)
        self._frame = sp_wire.frame_ipc if ipc else sp_wire.frame_tcp
        self._out: deque[memoryview] = deque()
        self._out_bytes = 0
        self._writing = False
        self._drained: trio.Event | None = None
        self._nursery = nursery
        self.closed = False
        self._recv_burst = 0
        #: Called once what was queued here has all been written (set it again to hear again).
        self.on_drained: Callable[[], None] | None = None

    # -- sending ------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Bytes queued here because the kernel could not take them yet."""
        return self._out_bytes

    def send(self, payload: bytes) -> bool:
        """Queue one message; it leaves at once if the kernel takes it. False if closed."""
        return self.send_raw(self._frame(payload))

    def send_raw(self, data: bytes) -> bool:
        """Already-framed bytes (whole messages only)."""
        if self.closed:
            return False
        if self._out:
            self._queue(memoryview(data))
            return True
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.close()
            return False
        if sent < len(data):
            self._queue(memoryview(data)[sent:])
        return True

    def _queue(self, view: memoryview) -> None:
        self._out.append(view)
        self._out_bytes += len(view)
        if not self._writing:
            self._writing = True
            self._nursery.start_soon(self._write_queued)

    async def _write_queued(self) -> None:
        out = self._out
        try:
            while out and not self.closed:
                await trio.lowlevel.wait_writable(self.sock)
                try:
                    sent = self.sock.sendmsg(list(islice(out, 512)))
                except BlockingIOError:
                    continue
                self._out_bytes -= sent
                while sent:
                    head = out[0]
                    if len(head) <= sent:
                        sent -= len(head)
                        out.popleft()
                    else:
                        out[0] = head[sent:]
                        sent = 0
                self._wake_drained()
        except (OSError, trio.ClosedResourceError):
            self.close()
        finally:
            self._writing = False
            self._wake_drained()
        if not out and not self.closed and self.on_drained is not None:
            callback, self.on_drained = self.on_drained, None
            callback()

    def _wake_drained(self) -> None:
        if self._drained is not None:
            self._drained.set()
            self._drained = None

    async def wait_pending_below(self, limit: int) -> None:
        """Until fewer than `limit` bytes wait to be written (or the connection closed)."""
        while self._out_bytes >= limit and not self.closed:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    # -- receiving -----------------------------------------------------------------

    async def receive(self) -> list[bytes | Oversize]:
        """The next messages (at least one); `Closed` at the end of the stream, `WireError`
        if the peer breaks the protocol."""
        while True:
            if self._recv_burst >= BURST:
                self._recv_burst = 0
                await trio.lowlevel.checkpoint()
            messages = await self._read()
            if messages:
                return messages

    async def handshake(self, protocol: int, timeout_s: float = HANDSHAKE_TIMEOUT_S) -> list[bytes | Oversize]:
        """Send our header, then wait for the peer's (checked by the reader). Returns any
        messages that arrived with it."""
        self.send_raw(sp_wire.handshake(protocol))
        messages: list[bytes | Oversize] = []
        with trio.move_on_after(timeout_s):
            while self.reader.expect is not None:
                messages = await self._read()
        if self.reader.expect is not None:
            raise WireError("no handshake from the peer in time")
        return messages

    async def _read(self) -> list[bytes | Oversize]:
        """What one receive brings (maybe no whole message); waits when nothing is there."""
        try:
            n = self.sock.recv_into(_RECV_BUFFER)
        except BlockingIOError:
            self._recv_burst = 0
            try:
                await trio.lowlevel.wait_readable(self.sock)
            except trio.ClosedResourceError:
                raise Closed() from None
            return []
        except OSError as exc:
            raise Closed(str(exc)) from None
        if not n:
            raise Closed()
        self._recv_burst += 1
        return self.reader.feed(_RECV_VIEW[:n])

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._out.clear()
        self._out_bytes = 0
        self._wake_drained()
        try:
            trio.lowlevel.notify_closing(self.sock)
        except RuntimeError:
            pass  # not inside trio (a test, or shutdown)
        self.sock.close()


# -- endpoints -------------------------------------------------------------------------


def bind(url: str, backlog: int = socket.SOMAXCONN) -> socket.socket:
    """A listening socket for `url`. An ipc socket file is made owner-only; a stale one
    (its daemon died) is replaced, a live one raises `AddressInUse`."""
    kind, rest = split_url(url)
    if kind == "ipc":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _bind_ipc(sock, rest)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
    else:
        host, port = tcp_address(rest)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise AddressInUse(f"{url} is in use") from None
                raise
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
    sock.setblocking(False)
    return sock


def _bind_ipc(sock: socket.socket, path: str) -> None:
    old_umask = os.umask(0o177)  # the file is born 0600: no window where others can connect
    try:
        try:
            sock.bind(path)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            if _ipc_alive(path):
                raise AddressInUse(f"ipc://{path} is in use") from None
            try:
                if stat.S_ISSOCK(os.stat(path).st_mode):
                    os.unlink(path)  # left by a process that died
            except FileNotFoundError:
                pass
            sock.bind(path)
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)


def _ipc_alive(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def ipc_file_id(url: str) -> int | None:
    """The inode of the socket file a listener just bound (to recognise it later)."""
    kind, path = split_url(url)
    return os.stat(path).st_ino if kind == "ipc" else None


def unlink_ipc(url: str, file_id: int | None) -> None:
    """Remove the socket file a listener bound, unless another process has replaced it."""
    if file_id is None:
        return
    path = split_url(url)[1]
    try:
        if os.stat(path).st_ino == file_id:
            os.unlink(path)
    except OSError:
        pass


async def accept_loop(listener: socket.socket, on_accept) -> None:  # type: ignore[no-untyped-def]
    """Call `on_accept(sock)` for every connection, until cancelled or the listener closes."""
    while True:
        try:
            sock, _ = listener.accept()
        except BlockingIOError:
            try:
                await trio.lowlevel.wait_readable(listener)
            except trio.ClosedResourceError:
                return
            continue
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                await trio.sleep(0.1)  # out of descriptors: let some close
                continue
            if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                continue
            if exc.errno in (errno.EBADF, errno.EINVAL):
                return  # the listener was closed
            raise
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        on_accept(sock)


__all__ = ["AddressInUse", "Closed", "Conn", "Oversize", "WireError", "accept_loop", "bind",
           "ipc_file_id", "split_url", "unlink_ipc"]
