"""A fake provider HTTP server on 127.0.0.1, for tests of real HTTP behaviour.

Each route holds a queue of scripted replies (taken one per request; the last
one repeats). A reply is a status, headers and a body given as chunks, with
optional pauses between chunks, a stall (no more bytes, connection open) or a
disconnect midway. Every request is recorded (method, path, headers, JSON body).
Built on h11 (already installed with httpx) so the HTTP framing is right.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h11
import trio


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    delay_s: float = 0.0  # pause before each chunk
    stall_after: int | None = None  # after this many chunks, send nothing more (connection stays open)
    disconnect_after: int | None = None  # after this many chunks, drop the connection
    hold_after: int | None = None  # after this many chunks, wait for `release` before the rest
    release: trio.Event | None = None
    repeat: bytes | None = None  # after the chunks, send this for ever (until the client hangs up)

    @classmethod
    def json(cls, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
        return cls(status, {"content-type": "application/json", **(headers or {})}, [json.dumps(body).encode()])

    @classmethod
    def sse(cls, body: bytes | str, *, chunk_size: int | None = None, **kwargs: Any) -> Reply:
        data = body.encode() if isinstance(body, str) else body
        size = chunk_size or len(data) or 1
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        return cls(200, {"content-type": "text/event-stream"}, chunks, **kwargs)

    @classmethod
    def ndjson(cls, lines: list[Any], **kwargs: Any) -> Reply:
        chunks = [(json.dumps(line) + "\n").encode() for line in lines]
        return cls(200, {"content-type": "application/x-ndjson"}, chunks, **kwargs)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class FakeUpstream:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Reply | Callable[[Recorded], Reply]]] = {}
        self.requests: list[Recorded] = []
        self.port = 0
        self.open_connections = 0
        self._connections_changed = trio.Event()
        self.closed_early = 0  # streams the client abandoned before the end
        self.client_closed = trio.Event()
        self.request_seen = trio.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def sent(self, path: str, method: str = "POST") -> list[Recorded]:
        """The requests made to one route (workers also probe local servers now and then)."""
        return [r for r in self.requests if r.method == method and r.path.split("?", 1)[0] == path]

    async def wait_open_connections(self, count: int) -> None:
        """Until exactly `count` client connections are open."""
        while self.open_connections != count:
            changed = self._connections_changed
            await changed.wait()

    def _connection_count(self, change: int) -> None:
        self.open_connections += change
        self._connections_changed.set()
        self._connections_changed = trio.Event()

    def route(self, method: str, path: str, *replies: Reply | Callable[[Recorded], Reply]) -> None:
        self.routes[(method, path)] = list(replies)

    async def start(self, nursery: trio.Nursery) -> FakeUpstream:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, self._serve, listeners)
        return self

    def _next_reply(self, method: str, path: str) -> Reply | Callable[[Recorded], Reply]:
        path = path.split("?", 1)[0]
        queue = self.routes.get((method, path))
        if not queue:
            return Reply.json({"error": f"no route {method} {path}"}, status=404)
        return queue.pop(0) if len(queue) > 1 else queue[0]

    async def _serve(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        self._connection_count(+1)
        try:
            while True:
                request = await self._read_request(stream, conn)
                if request is None:
                    return
                reply = self._next_reply(request.method, request.path)
                if callable(reply):  # a reply that depends on the request (streamed or not, say)
                    reply = reply(request)
                self.requests.append(request)
                self.request_seen.set()
                if not await self._send(stream, conn, reply):
                    return
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return
        finally:
            self._connection_count(-1)
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _read_request(self, stream: trio.SocketStream, conn: h11.Connection) -> Recorded | None:
        head: h11.Request | None = None
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                conn.receive_data(data)
                if not data and conn.their_state is not h11.DONE:
                    return None
                continue
            if isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return Recorded(
                    head.method.decode(),
                    head.target.decode(),
                    {k.decode().lower(): v.decode() for k, v in head.headers},
                    body,
                )
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def _send(self, stream: trio.SocketStream, conn: h11.Connection, reply: Reply) -> bool:
        headers = [(k, v) for k, v in reply.headers.items()]
        whole = (
            reply.delay_s == 0
            and reply.stall_after is None
            and reply.disconnect_after is None
            and reply.hold_after is None
            and reply.repeat is None
        )
        if whole:
            headers.append(("content-length", str(sum(len(c) for c in reply.chunks))))
        else:
            headers.append(("transfer-encoding", "chunked"))
        await stream.send_all(conn.send(h11.Response(status_code=reply.status, headers=headers)))
        try:
            for i, chunk in enumerate(reply.chunks):
                if reply.stall_after is not None and i >= reply.stall_after:
                    # Silent, but watching: the client hanging up is what a cancel must do.
                    while await stream.receive_some(65536):
                        pass
                    raise trio.BrokenResourceError
                if reply.disconnect_after is not None and i >= reply.disconnect_after:
                    return False
                if i == reply.hold_after and reply.release is not None:
                    await reply.release.wait()
                if reply.delay_s:
                    await trio.sleep(reply.delay_s)
                if chunk:
                    await stream.send_all(conn.send(h11.Data(data=chunk)))
            while reply.repeat is not None:
                await stream.send_all(conn.send(h11.Data(data=reply.repeat)))
            await stream.send_all(conn.send(h11.EndOfMessage()))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed_early += 1
            self.client_closed.set()
            return False
        return True
