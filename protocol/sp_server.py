"""The daemon's two client-facing sockets, speaking nng's wire (see `sp_wire`):
a Rep0 for the control endpoint and a Pub0 for the event endpoint.

Both run in the daemon's trio loop with no thread in between: a request is
handled by the task that read it, and its reply is written before that task
reads on; a publish is one `send` per subscriber. Like nng, the publisher
never waits for a subscriber: one that falls too far behind loses messages
(its client sees the gap in `seq`, or is told once it has caught up, and asks
`replay`).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from itertools import count

import trio

from . import sp_wire
from .sp_conn import Closed, Conn, Oversize, WireError, accept_loop, bind, ipc_file_id, split_url, unlink_ipc

log = logging.getLogger("trunkline.sp")

#: Unsent bytes a subscriber may hold here (about 16,000 typical events); what is
#: published beyond that, while it does not read, is dropped for it.
SUBSCRIBER_MAX_BYTES = 4 * 1024 * 1024

#: handler(body or Oversize, backtrace, connection id) -> reply body, or None to answer later
RequestHandler = Callable[[bytes | Oversize, bytes, int], "bytes | None"]


class _Listener:
    def __init__(self, url: str) -> None:
        self.url = url
        self.ipc = split_url(url)[0] == "ipc"
        self.sock: socket.socket = bind(url)
        self._file_id = ipc_file_id(url)
        self._ids = count(1)

    def close(self) -> None:
        unlink_ipc(self.url, self._file_id)
        try:
            trio.lowlevel.notify_closing(self.sock)
        except RuntimeError:
            pass
        self.sock.close()


class ReplyServer(_Listener):
    """Rep0, raw: every request goes to `handler` with its backtrace and its
    connection's id; the reply goes back on the same connection, now (the handler
    returns it) or later (`reply`). Requests on one connection are read in order;
    replies may go back in any order (the client matches them by request id)."""

    def __init__(self, url: str, max_size: int) -> None:
        super().__init__(url)
        self.max_size = max_size
        self.conns: dict[int, Conn] = {}
        self.on_close: Callable[[int], None] = lambda conn_id: None

    async def serve(self, handler: RequestHandler) -> None:
        async with trio.open_nursery() as nursery:
            def accepted(sock: socket.socket) -> None:
                conn = Conn(sock, ipc=self.ipc, nursery=nursery, conn_id=next(self._ids), max_size=self.max_size,
                            expect=sp_wire.REQ0)
                nursery.start_soon(self._serve_conn, conn, handler)

            await accept_loop(self.sock, accepted)

    async def _serve_conn(self, conn: Conn, handler: RequestHandler) -> None:
        try:
            messages = await conn.handshake(sp_wire.REP0)
            self.conns[conn.id] = conn
            while True:
                for payload in messages:
                    self._request(conn, payload, handler)
                messages = await conn.receive()
        except (Closed, WireError) as exc:
            if isinstance(exc, WireError):
                log.debug("control connection %d dropped: %s", conn.id, exc)
        finally:
            conn.close()
            if self.conns.pop(conn.id, None) is not None:
                self.on_close(conn.id)

    def _request(self, conn: Conn, payload: bytes | Oversize, handler: RequestHandler) -> None:
        oversize = type(payload) is Oversize
        split = sp_wire.split_backtrace(payload.prefix if oversize else payload)  # type: ignore[union-attr,arg-type]
        if split is None:
            return  # too many hops: dropped, as nng does
        backtrace, body = split
        if oversize:
            body = Oversize(body, payload.size - len(backtrace))  # type: ignore[union-attr,assignment]
        reply = handler(body, backtrace, conn.id)
        if reply is not None:
            conn.send(backtrace + reply)

    def reply(self, conn_id: int, backtrace: bytes, body: bytes) -> bool:
        """Answer a request handled earlier; False if its client has gone."""
        conn = self.conns.get(conn_id)
        return conn is not None and conn.send(backtrace + body)

    def close(self) -> None:
        for conn in list(self.conns.values()):
            conn.close()
        super().close()


class Publisher(_Listener):
    """Pub0: every message goes to every subscriber; subscribers filter by topic.

    A subscriber that fell behind loses messages, but is told: once it has caught up
    (all that was queued for it is written), `on_lost(connection id, topics)` names
    the topics (the part of a message before its first NUL) it lost messages of, so
    the daemon can send it a notice on each (`send_to`)."""

    def __init__(self, url: str, max_bytes: int = SUBSCRIBER_MAX_BYTES) -> None:
        super().__init__(url)
        self.subscribers: dict[int, Conn] = {}
        self.max_bytes = max_bytes
        self.dropped = 0  # messages not sent to a slow subscriber (summed over subscribers)
        self.on_lost: Callable[[int, set[bytes]], None] = lambda conn_id, topics: None
        self._lost: dict[int, set[bytes]] = {}  # connection id -> topics it lost messages of
        self._frame = sp_wire.frame_ipc if self.ipc else sp_wire.frame_tcp

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            def accepted(sock: socket.socket) -> None:
                conn = Conn(sock, ipc=self.ipc, nursery=nursery, conn_id=next(self._ids), max_size=1,
                            expect=sp_wire.SUB0)
                nursery.start_soon(self._serve_conn, conn)

            await accept_loop(self.sock, accepted)

    async def _serve_conn(self, conn: Conn) -> None:
        try:
            await conn.handshake(sp_wire.PUB0)
            self.subscribers[conn.id] = conn
            while True:
                await conn.receive()  # a subscriber sends nothing; this ends when it goes
        except (Closed, WireError):
            pass
        finally:
            self.subscribers.pop(conn.id, None)
            self._lost.pop(conn.id, None)
            conn.close()

    def publish(self, message: bytes) -> None:
        """Send one message to every subscriber, never waiting."""
        data = self._frame(message)
        for conn in self.subscribers.values():
            self._send(conn, data, 1, message)

    def publish_many(self, messages: list[bytes]) -> None:
        """Several messages of one topic, written to each subscriber in one system call."""
        if len(messages) == 1:
            self.publish(messages[0])
            return
        frame = self._frame
        data = b"".join([frame(m) for m in messages])
        for conn in self.subscribers.values():
            self._send(conn, data, len(messages), messages[0])

    def _send(self, conn: Conn, data: bytes, n: int, first: bytes) -> None:
        if conn.pending and conn.pending + len(data) > self.max_bytes:
            self.dropped += n
            lost = self._lost.get(conn.id)
            if lost is None:
                lost = self._lost[conn.id] = set()
                conn.on_drained = lambda: self._caught_up(conn)
            lost.add(first[: first.find(b"\x00")])
            return
        conn.send_raw(data)

    def _caught_up(self, conn: Conn) -> None:
        topics = self._lost.pop(conn.id, None)
        if topics:
            self.on_lost(conn.id, topics)

    def send_to(self, conn_id: int, message: bytes) -> None:
        """One message to one subscriber (whatever its backlog)."""
        conn = self.subscribers.get(conn_id)
        if conn is not None:
            conn.send_raw(self._frame(message))

    def close(self) -> None:
        for conn in list(self.subscribers.values()):
            conn.close()
        super().close()


__all__ = ["Publisher", "ReplyServer"]
