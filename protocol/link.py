"""The supervisor <-> worker link: one socket pair per worker process.

The supervisor makes the pair just before it starts a worker and hands the
child its end as an inherited descriptor (`fd:N` in the worker's settings), so
the link has no file on disk, no listener and no handshake, and each worker
process has its own: nothing queued for a worker that died can reach its
successor. Either side sees the other exit as the end of the stream, at once.

Both ends are ours, so the framing is the plainest there is: a 4-byte
big-endian length, then that many bytes of msgpack. Sends go straight to the
kernel from the trio loop (no thread is woken); what the kernel cannot take at
once waits here, in order, and its size is visible so the worker can push back.
"""

from __future__ import annotations

import contextlib
import mmap
import socket
import struct
from collections import deque
from itertools import islice

import trio

#: Kernel buffer per direction: a burst of events rarely has to wait in user space.
BUFFER_BYTES = 1024 * 1024
RECV_SIZE = 256 * 1024
#: Consecutive receives before a reader lets other tasks run.
BURST = 16
_HEAD = struct.Struct(">I")
#: Largest frame: the length field's range. Both ends are ours; this only guards
#: against a corrupt stream.
MAX_FRAME = 0xFFFFFFFF


class Closed(Exception):
    """The link is closed (by the other side, or here)."""


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(the supervisor's end, the worker's end); neither is inherited by accident
    (Python makes them close-on-exec; `pass_fds` hands the worker its end)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for sock in (ours, theirs):
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            with contextlib.suppress(OSError):  # the system's cap applies
                sock.setsockopt(socket.SOL_SOCKET, opt, BUFFER_BYTES)
    return ours, theirs


def inherited(spec: str) -> socket.socket:
    """The worker's end, from its settings (`fd:N`)."""
    kind, _, number = spec.partition(":")
    if kind != "fd" or not number.isdigit():
        raise ValueError(f"not a link descriptor: {spec!r}")
    return socket.socket(fileno=int(number))


def frame(payload: bytes) -> bytes:
    return _HEAD.pack(len(payload)) + payload


class FrameReader:
    """Bytes in, whole frames out, whatever the chunking.

    A large frame (a response's closing events can be twice the response limit) is
    gathered in a buffer of its own exact size as it arrives and handed out as that
    buffer: never copied whole again, where slicing it out of a growing buffer cost
    three copies of it at once."""

    __slots__ = ("_big", "_buf", "_filled")

    #: From this size a frame still arriving gets a buffer of its own.
    BIG = 1 << 20

    def __init__(self) -> None:
        self._buf = bytearray()
        self._big: bytearray | None = None
        self._filled = 0

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | bytearray]:
        out: list[bytes | bytearray] = []
        view = memoryview(data)
        if self._big is not None:
            view = self._fill(view, out)
            if self._big is not None:
                return out
        buf = self._buf
        buf += view
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _HEAD.unpack_from(buf, pos)
            have = end - pos - 4
            if have < size:
                if size >= self.BIG:
                    self._big = bytearray(size)
                    self._big[:have] = memoryview(buf)[pos + 4 : end]
                    self._filled = have
                    pos = end
                break
            out.append(bytes(memoryview(buf)[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return out

    def _fill(self, view: memoryview, out: list[bytes | bytearray]) -> memoryview:
        """Copy into the large frame being gathered; the rest of `view` once it is whole."""
        big = self._big
        assert big is not None
        take = min(len(view), len(big) - self._filled)
        big[self._filled : self._filled + take] = view[:take]
        self._filled += take
        if self._filled == len(big):
            out.append(big)
            self._big = None
        return view[take:]


class LinkConn:
    """One end of a link, driven by the trio loop."""

    __slots__ = (
        "_buffer",
        "_drained",
        "_drained_read",
        "_nursery",
        "_out",
        "_out_bytes",
        "_recv_burst",
        "_writing",
        "closed",
        "reader",
        "sock",
    )

    def __init__(self, sock: socket.socket, nursery: trio.Nursery) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.reader = FrameReader()
        self._out: deque[memoryview] = deque()
        self._out_bytes = 0
        self._writing = False
        self._drained: trio.Event | None = None
        self._nursery = nursery
        self.closed = False
        self._recv_burst = 0
        self._drained_read = False  # the last read took less than a buffer: nothing was left
        # An anonymous mapping, not a bytearray (which zero-fills, so every page of it is
        # resident at once): only the pages a read has reached take memory, one for the
        # small messages of an idle link (256 KiB less in each worker, and per worker in
        # the supervisor).
        self._buffer = mmap.mmap(-1, RECV_SIZE)

    # -- sending ------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Bytes queued here because the kernel could not take them yet."""
        return self._out_bytes

    def send(self, payload: bytes) -> bool:
        """Queue one message; it leaves at once if the kernel takes it. False if closed."""
        if self.closed:
            return False
        data = frame(payload)
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

    def _wake_drained(self) -> None:
        if self._drained is not None:
            self._drained.set()
            self._drained = None

    async def wait_pending_below(self, limit: int) -> None:
        """Until fewer than `limit` bytes wait to be written (or the link closed)."""
        while self._out_bytes >= limit and not self.closed:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    # -- receiving -----------------------------------------------------------------

    async def receive(self) -> list[bytes | bytearray]:
        """The next messages (at least one); `Closed` at the end of the stream."""
        while True:
            if self._recv_burst >= BURST:
                self._recv_burst = 0
                await trio.lowlevel.checkpoint()
            if self._drained_read:
                # The last read emptied the kernel's buffer: a read now would most likely
                # find nothing (a system call and an exception), so wait first.
                self._drained_read = False
                self._recv_burst = 0
                await self._wait_readable()
            try:
                n = self.sock.recv_into(self._buffer)
            except BlockingIOError:
                self._recv_burst = 0
                await self._wait_readable()
                continue
            except OSError as exc:
                raise Closed(str(exc)) from None
            if not n:
                raise Closed()
            self._recv_burst += 1
            self._drained_read = n < RECV_SIZE
            messages = self.reader.feed(memoryview(self._buffer)[:n])
            if messages:
                return messages

    async def _wait_readable(self) -> None:
        try:
            await trio.lowlevel.wait_readable(self.sock)
        except trio.ClosedResourceError:
            raise Closed() from None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._out.clear()
        self._out_bytes = 0
        self._wake_drained()
        with contextlib.suppress(RuntimeError):  # not inside trio (a test, or shutdown)
            trio.lowlevel.notify_closing(self.sock)
        self.sock.close()


def conn(sock: socket.socket, nursery: trio.Nursery) -> LinkConn:
    """A link end as a connection."""
    return LinkConn(sock, nursery)
