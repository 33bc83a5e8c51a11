"""The client's side of nng's wire: a Req0 for control calls and a Sub0 for events, on
plain non-blocking sockets that the program's own event loop (trio or asyncio,
through anyio) waits on. No thread sits between a call and its reply.

Control calls match replies by request id, so any number may be in flight; the
task that waits for a reply reads the socket itself while no other does (the
common case: one call, no hand-over), and passes the reading on when it has
its answer. The event socket keeps only the topics subscribed to and drops
the rest while cutting messages out, without copying them.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
from typing import Any

import anyio

from .protocol import sp_wire
from .protocol.sp_wire import FrameReader, WireError

RECV_SIZE = 128 * 1024
HANDSHAKE_TIMEOUT_S = 10.0


class Disconnected(ConnectionError):
    """The daemon closed the connection, or it broke. `unsent`: the message being sent
    had not begun to leave, so sending it on a new connection cannot duplicate it."""

    def __init__(self, message: str, unsent: bool = False) -> None:
        super().__init__(message)
        self.unsent = unsent


async def dial(url: str) -> tuple[socket.socket, bool]:
    """A connected non-blocking socket for `url`, and whether it frames as ipc. Raises
    `FileNotFoundError` / `ConnectionRefusedError` when nothing listens there."""
    kind, rest = sp_wire.split_url(url)
    if kind == "ipc":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address: Any = rest
    else:
        host, port = sp_wire.tcp_address(rest)
        infos = await anyio.getaddrinfo(host or "127.0.0.1", port, type=socket.SOCK_STREAM)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    try:
        try:
            sock.connect(address)
        except BlockingIOError:
            await anyio.wait_writable(sock)
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, os.strerror(err)) from None
    except BaseException:
        sock.close()
        raise
    return sock, kind == "ipc"


def _io_waiters() -> tuple[Any, Any, tuple[type[BaseException], ...]]:
    """How to wait for a socket in the running event loop. Under trio, trio's own
    functions: anyio's look the backend up on every call, which the client makes a
    few times per request."""
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            pass  # trio is imported, but this is another event loop
        else:
            return (trio.lowlevel.wait_readable, trio.lowlevel.wait_writable,
                    (trio.ClosedResourceError, anyio.ClosedResourceError))
    return anyio.wait_readable, anyio.wait_writable, (anyio.ClosedResourceError,)


class _Stream:
    """One SP connection: framed sends that never interleave, whole-message receives."""

    def __init__(self, sock: socket.socket, ipc: bool, reader: FrameReader) -> None:
        self.sock = sock
        self.reader = reader
        self._frame = sp_wire.frame_ipc if ipc else sp_wire.frame_tcp
        self._wait_readable, self._wait_writable, self._closed_errors = _io_waiters()
        self._sending = False
        self._sent: anyio.Event | None = None
        self._early: list[bytes] = []  # messages that came in with the peer's handshake
        self._buffer = bytearray(RECV_SIZE)
        self.closed = False

    @classmethod
    async def open(cls, url: str, protocol: int, peer: int, accept: tuple[bytes, ...] | None = None) -> _Stream:
        sock, ipc = await dial(url)
        stream = cls(sock, ipc, FrameReader(ipc=ipc, expect=peer, accept=accept))
        try:
            await stream.send_raw(sp_wire.handshake(protocol))
            with anyio.fail_after(HANDSHAKE_TIMEOUT_S):
                while stream.reader.expect is not None:
                    await stream._wait()
                    # A busy publisher's first events may share a read with its header.
                    stream._early += stream._take() or []
        except (TimeoutError, WireError) as exc:
            stream.close()
            raise Disconnected(f"{url} does not speak nng's {sp_wire.NAMES[peer]}: {exc}") from None
        except BaseException:
            stream.close()
            raise
        return stream

    async def send(self, payload: bytes) -> None:
        await self.send_raw(self._frame(payload))

    async def send_raw(self, data: bytes) -> None:
        """All of `data`, after any message already half-way out. Once begun, a message
        is finished even if the caller is cancelled: half a message would break the
        stream for every later call."""
        while self._sending:
            assert self._sent is not None
            await self._sent.wait()
        if self.closed:
            raise Disconnected("connection closed", unsent=True)
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise Disconnected(str(exc), unsent=True) from None
        if sent == len(data):
            return
        self._sending = True
        self._sent = anyio.Event()
        view = memoryview(data)[sent:]
        try:
            with anyio.CancelScope(shield=True):
                while view:
                    await self._wait_writable(self.sock)
                    try:
                        view = view[self.sock.send(view):]
                    except BlockingIOError:
                        continue
        except OSError as exc:
            raise Disconnected(str(exc)) from None
        except self._closed_errors:
            raise Disconnected("connection closed") from None
        finally:
            self._sending = False
            self._sent.set()

    async def _wait(self) -> None:
        try:
            await self._wait_readable(self.sock)
        except self._closed_errors:
            raise Disconnected("connection closed") from None

    def _take(self) -> list[bytes] | None:
        """Whatever whole messages the kernel has now (maybe none); None when it had no
        byte at all. Trying first is cheaper than waiting first: on a busy machine the
        answer is often there by the time we look."""
        try:
            n = self.sock.recv_into(self._buffer)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise Disconnected(str(exc)) from None
        if not n:
            raise Disconnected("the daemon closed the connection")
        # A copy of exactly what arrived: `recv(RECV_SIZE)` allocated the whole size
        # each time and shrank it, which fragments a long-running process's heap.
        return self.reader.feed(self._buffer[:n])  # type: ignore[return-value]

    def ready(self) -> list[bytes] | None:
        """Messages already here, without waiting: a list (maybe empty, when only part of
        a message is there), or None when there was nothing to read."""
        if self._early:
            early, self._early = self._early, []
            return early
        return self._take()

    async def receive(self) -> list[bytes]:
        """At least one whole message."""
        if self._early:
            early, self._early = self._early, []
            return early
        while True:
            messages = self._take()
            if messages:
                return messages
            await self._wait()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            anyio.notify_closing(self.sock)
        except (RuntimeError, anyio.NoEventLoopError):
            pass
        self.sock.close()


class _Pending:
    __slots__ = ("reply", "error", "wake")

    def __init__(self) -> None:
        self.reply: bytes | None = None
        self.error: Exception | None = None
        self.wake = anyio.Event()


class ControlSocket:
    """Req0: `call(body)` returns the daemon's reply. Never resends (nng's Req0 would,
    after 60 s, even to a restarted daemon: a duplicate LLM call)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._stream: _Stream | None = None
        self._connecting: anyio.Lock | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._reading = False

    async def connect(self) -> None:
        if self._stream is not None and not self._stream.closed:
            return
        if self._connecting is None:
            self._connecting = anyio.Lock()
        async with self._connecting:
            if self._stream is None or self._stream.closed:
                self._stream = await _Stream.open(self.url, sp_wire.REQ0, sp_wire.REP0)

    async def call(self, body: bytes) -> bytes:
        request_id = 0x80000000 | (next(self._ids) & 0x7FFFFFFF)
        message = request_id.to_bytes(4, "big") + body
        pending = self._pending[request_id] = _Pending()
        try:
            stream = await self._send(message)
            while pending.reply is None:
                if pending.error is not None:
                    raise pending.error
                if self._reading:
                    await pending.wake.wait()  # the reader hands us our reply, or the reading
                    pending.wake = anyio.Event()
                    continue
                await self._read(stream)
            return pending.reply
        finally:
            del self._pending[request_id]
            self._hand_over()

    async def _send(self, message: bytes) -> _Stream:
        """Send on the current connection; if the daemon has gone since (a restart),
        dial again and send there, once: it had received nothing of this message."""
        for attempt in range(2):
            if self._stream is None or self._stream.closed:
                await self.connect()
            stream = self._stream
            assert stream is not None
            try:
                await stream.send(message)
                return stream
            except Disconnected as exc:
                stream.close()
                if attempt or not exc.unsent:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, stream: _Stream) -> None:
        self._reading = True
        try:
            messages = await stream.receive()
        except Disconnected as exc:
            stream.close()
            for other in self._pending.values():
                other.error = exc
                other.wake.set()
            raise
        finally:
            self._reading = False
        for message in messages:
            if len(message) < 4:
                continue
            got = self._pending.get(int.from_bytes(message[:4], "big"))
            if got is not None:  # else an answer to a call that gave up waiting
                got.reply = message[4:]
                got.wake.set()

    def _hand_over(self) -> None:
        """A caller stops reading (answered, or gave up): wake one still waiting to read on."""
        if self._reading:
            return
        for other in self._pending.values():
            if other.reply is None:
                other.wake.set()
                return

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()


class EventSocket:
    """Sub0: the messages of the subscribed topics, in the order published."""

    def __init__(self, url: str, topics: tuple[bytes, ...]) -> None:
        self.url = url
        self.topics = topics
        self._stream: _Stream | None = None

    async def connect(self) -> None:
        self._stream = await _Stream.open(self.url, sp_wire.SUB0, sp_wire.PUB0, accept=self.topics)

    def subscribe(self, topic: bytes) -> None:
        if topic not in self.topics:
            self.topics = (*self.topics, topic)
            if self._stream is not None:
                self._stream.reader.accept = self.topics

    def ready(self) -> list[bytes] | None:
        assert self._stream is not None
        return self._stream.ready()

    async def receive(self) -> list[bytes]:
        assert self._stream is not None
        return await self._stream.receive()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()


__all__ = ["ControlSocket", "Disconnected", "EventSocket", "dial"]
