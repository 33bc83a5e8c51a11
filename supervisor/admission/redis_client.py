"""One pipelined connection to Redis, on trio.

Commands are written back to back on one socket and their replies matched in
order, so many tasks share a connection and a batch of commands costs one round
trip. `RedisClient.run` keeps the connection: it connects (TLS for `rediss://`,
then AUTH and SELECT), reads replies, and when the connection fails or a call
times out it drops it, fails what was waiting with `RedisUnreachable` and
connects again with a growing backoff. A call made while there is no connection
fails at once: the caller (the shared store) decides locally instead of waiting.
"""

from __future__ import annotations

import ssl
from collections import deque

import trio

from ...config.redis_url import BadRedisUrl, RedisTarget, parse_url
from .resp import Arg, Decoder, ErrorReply, NeedMore, Reply, RespError, encode_command, encode_commands

#: Backoff between two connection attempts: from the first to the last, doubling.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 2.0
READ_BYTES = 65536


__all__ = ["BadRedisUrl", "RedisClient", "RedisReplyError", "RedisTarget", "RedisUnreachable", "parse_url"]


class RedisUnreachable(Exception):
    """No answer from Redis: no connection, a failed one, or a call that timed out."""


class RedisReplyError(Exception):
    """Redis answered with an error reply (`code`: its first word, e.g. NOSCRIPT)."""

    def __init__(self, reply: ErrorReply) -> None:
        super().__init__(reply.message)
        self.code = reply.code


class _Waiter:
    """One reply owed to a caller."""

    __slots__ = ("done", "error", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: Reply = None
        self.error: RedisUnreachable | None = None


class _Connection:
    __slots__ = ("decoder", "reading", "send_lock", "stream", "waiting")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = Decoder()
        self.waiting: deque[_Waiter] = deque()
        self.send_lock = trio.Lock()
        #: The reader's scope: cancelled when the connection is dropped.
        self.reading = trio.CancelScope()


class RedisClient:
    """`call` one command, `pipeline` several in one round trip; each bounded by
    `timeout_s`. Run `run()` in a nursery for the client's life."""

    def __init__(self, url: str, *, timeout_s: float = 0.25, tls_ca_file: str | None = None) -> None:
        self.target = parse_url(url)
        self.timeout_s = timeout_s
        self.tls_ca_file = tls_ca_file
        self._conn: _Connection | None = None
        #: Why the last connection attempt or connection failed (no secret in it).
        self.last_error = "not connected yet"
        #: Set while connected; tests and the shared store's catch-up wait on it.
        self.connected = trio.Event()
        self.connects = 0
        #: Writes sent (each a command or a pipeline): round trips, for the bench and metrics.
        self.round_trips = 0
        self._kick = trio.Event()

    @property
    def is_connected(self) -> bool:
        return self._conn is not None

    # -- calls ---------------------------------------------------------------------------

    async def call(self, *args: Arg) -> Reply:
        """One command's reply; an error reply raises `RedisReplyError`."""
        reply = (await self._send(encode_command(*args), 1))[0]
        if isinstance(reply, ErrorReply):
            raise RedisReplyError(reply)
        return reply

    async def pipeline(self, commands: list[tuple[Arg, ...]]) -> list[Reply]:
        """Each command's reply, in order (error replies as `ErrorReply` values)."""
        if not commands:
            return []
        return await self._send(encode_commands(commands), len(commands))

    async def _send(self, data: bytes, count: int) -> list[Reply]:
        conn = self._conn
        if conn is None:
            raise RedisUnreachable(f"no connection to Redis ({self.last_error})")
        waiters = [_Waiter() for _ in range(count)]
        self.round_trips += 1
        with trio.move_on_after(self.timeout_s) as scope:
            async with conn.send_lock:
                # Queued in the order the bytes go out, so replies match them.
                conn.waiting.extend(waiters)
                try:
                    await conn.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    self._drop(conn, f"send failed: {type(exc).__name__}")
            for waiter in waiters:
                await waiter.done.wait()
        if scope.cancelled_caught:
            # A connection that does not answer within the timeout is not trusted again:
            # replies to abandoned calls would only arrive late, if ever.
            self._drop(conn, f"no reply within {self.timeout_s:g} s")
            raise RedisUnreachable(f"Redis did not answer within {self.timeout_s:g} s")
        replies: list[Reply] = []
        for waiter in waiters:
            if waiter.error is not None:
                raise waiter.error
            replies.append(waiter.reply)
        return replies

    # -- the connection --------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a connection until cancelled: connect, read, reconnect with backoff.
        Started (task_status) after the first attempt, whether it succeeded or not."""
        backoff = BACKOFF_FIRST_S
        started = False
        while True:
            try:
                conn = await self._connect()
            except RedisUnreachable as exc:
                self.last_error = str(exc)
                conn = None
            if not started:
                started = True
                task_status.started()
            if conn is None:
                with trio.move_on_after(backoff):
                    await self._kick.wait()
                self._kick = trio.Event()
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            backoff = BACKOFF_FIRST_S
            self.connects += 1
            self._conn = conn
            self.connected.set()
            try:
                with conn.reading:
                    await self._read(conn)
            finally:
                self._drop(conn, self.last_error)
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(conn.stream)

    def retry_now(self) -> None:
        """Skip the rest of the backoff (a test restarted Redis, say)."""
        self._kick.set()

    async def _connect(self) -> _Connection:
        target = self.target
        where = f"{target.host}:{target.port}"
        opened: list[trio.abc.Stream] = []
        try:
            with trio.fail_after(max(self.timeout_s * 4, 1.0)):
                stream: trio.abc.Stream = await trio.open_tcp_stream(target.host, target.port)
                opened.append(stream)
                if target.tls:
                    context = ssl.create_default_context(cafile=self.tls_ca_file)
                    stream = trio.SSLStream(stream, context, server_hostname=target.host)
                    await stream.do_handshake()
                conn = _Connection(stream)
                hello: list[tuple[Arg, ...]] = []
                if target.password is not None:
                    hello.append(
                        ("AUTH", target.username, target.password) if target.username else ("AUTH", target.password)
                    )
                if target.db:
                    hello.append(("SELECT", target.db))
                # A PING last: a server that accepts connections but does not answer (stopped,
                # overloaded) is not taken for one that is back.
                hello.append(("PING",))
                await stream.send_all(encode_commands(hello))
                with trio.fail_after(self.timeout_s):
                    replies = await _read_replies(stream, conn.decoder, len(hello))
                refused = next((r for r in replies if isinstance(r, ErrorReply)), None)
                if refused is not None:
                    # AUTH's errors never echo the password; SELECT's name the db.
                    raise RedisUnreachable(f"Redis at {where} refused the connection: {refused.message[:200]}")
                opened.clear()  # kept: it is the connection now
                return conn
        except trio.TooSlowError:
            raise RedisUnreachable(f"could not connect to Redis at {where}: timed out") from None
        except (OSError, trio.BrokenResourceError, ssl.SSLError, RespError) as exc:
            raise RedisUnreachable(f"could not connect to Redis at {where}: {_reason(exc)}") from None
        finally:
            for half_open in opened:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(half_open)

    async def _read(self, conn: _Connection) -> None:
        decoder = conn.decoder
        while True:
            try:
                data = await conn.stream.receive_some(READ_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ssl.SSLError) as exc:
                self.last_error = f"connection lost: {_reason(exc)}"
                return
            if not data:
                self.last_error = "connection closed by Redis"
                return
            decoder.feed(data)
            try:
                while True:
                    reply = decoder.next()
                    if isinstance(reply, NeedMore):
                        break
                    if not conn.waiting:
                        self.last_error = "Redis sent a reply no command asked for"
                        return
                    waiter = conn.waiting.popleft()
                    waiter.reply = reply
                    waiter.done.set()
            except RespError as exc:
                self.last_error = f"Redis sent bytes that are not RESP2: {exc}"
                return

    def _drop(self, conn: _Connection, reason: str) -> None:
        """The connection is done: every call still waiting on it fails."""
        if self._conn is conn:
            self._conn = None
            self.connected = trio.Event()
            self.last_error = reason
        conn.reading.cancel()
        failure = RedisUnreachable(f"lost the connection to Redis ({reason})")
        while conn.waiting:
            waiter = conn.waiting.popleft()
            waiter.error = failure
            waiter.done.set()


async def _read_replies(stream: trio.abc.Stream, decoder: Decoder, count: int) -> list[Reply]:
    replies: list[Reply] = []
    while len(replies) < count:
        reply = decoder.next()
        if isinstance(reply, NeedMore):
            data = await stream.receive_some(READ_BYTES)
            if not data:
                raise trio.BrokenResourceError("connection closed")
            decoder.feed(data)
            continue
        replies.append(reply)
    return replies


def _reason(exc: BaseException) -> str:
    # trio wraps a failed TLS handshake in BrokenResourceError: the cause says what failed.
    if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"[:200] if str(exc) else type(exc).__name__
