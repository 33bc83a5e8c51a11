"""Every pynng detail in one place: the daemon's Rep0 and Pub0, the client's Req0
and Sub0, TLS, and the bounds on what one peer can hold.

How pynng is used, and why (figures in docs/ARCHITECTURE.md):

* No thread hop per message where it can be avoided. pynng's `arecv`/`asend`
  run every message through an nng thread and a callback into the event loop;
  instead the loop waits on nng's readiness descriptors (`recv_fd`, `send_fd`)
  and calls nng's non-blocking `nng_recv`/`nng_send` itself.
* Where an awaitable send cannot be avoided (a call on its own nng context),
  it goes through `_asend`, which frees the message if the send is cancelled:
  pynng 0.9 leaks it (about 10 KB each).
* The daemon's Rep0 is raw: a request's routing header comes with it and goes
  back with its reply, so one socket serves every request and a slow reply
  (`ready`, `count_tokens`) never holds up another. nng keeps at most 64
  unsent replies per connection and drops beyond that, so a client that
  pipelines requests and never reads its replies costs at most that.
* Pub0 never waits for a subscriber: each connection has a queue of
  `send_buffer` messages (shared, reference-counted copies), and a subscriber
  that falls further behind loses its oldest messages.

Waiting uses trio's own functions inside trio (anyio looks the backend up on
every call) and anyio's elsewhere, so the client serves asyncio programs too.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import resource
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pynng
import pynng.sockaddr
import trio
from pynng import _aio
from pynng._nng import ffi, lib

log = logging.getLogger("trunkline.nng")

Closed = pynng.Closed
AddressInUse = pynng.AddressInUse
ConnectionRefused = pynng.ConnectionRefused
NNGException = pynng.NNGException
TLSConfig = pynng.TLSConfig

#: nng's largest queue, in messages: with the defaults (16 on a Pub0, 128 on a Sub0)
#: a burst of events loses most of them.
MAX_QUEUE = 8192
#: Control calls one client keeps in flight on its connection at most (see `Requester`).
MAX_CALLS_IN_FLIGHT = 48
#: How often a call waiting for its reply checks that its connection still stands.
RESET_POLL_S = 0.25
IPC_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL
_ALLOC_NONBLOCK = lib.NNG_FLAG_ALLOC | lib.NNG_FLAG_NONBLOCK
_SCHEMES = ("ipc", "abstract", "tcp", "tcp4", "tcp6", "tls+tcp", "tls+tcp4", "tls+tcp6", "ws", "wss", "socket")


# -- endpoints ---------------------------------------------------------------------


def scheme(url: str) -> str:
    """The transport of an nng URL (`ipc`, `tcp`, `tls+tcp`, ...); ValueError if unknown."""
    head, sep, _ = url.partition("://")
    if not sep or head not in _SCHEMES:
        raise ValueError(f"not an nng endpoint URL: {url!r} (expected one of {', '.join(s + '://' for s in _SCHEMES)})")
    return head


def is_remote(url: str) -> bool:
    """Whether clients reach the endpoint over a network (then `hello` needs the token)."""
    return scheme(url) not in ("ipc", "abstract", "socket")


def is_tls(url: str) -> bool:
    return scheme(url) in ("tls+tcp", "tls+tcp4", "tls+tcp6", "wss")


def ipc_path(url: str) -> Path | None:
    return Path(url[len("ipc://") :]) if url.startswith("ipc://") else None


def check_url(url: str) -> None:
    scheme(url)
    path = ipc_path(url)
    if path is not None and len(str(path).encode()) > IPC_PATH_MAX:
        raise ValueError(f"ipc path too long ({len(str(path).encode())} bytes, max {IPC_PATH_MAX}): {path}")


def server_tls(cert_file: str, key_file: str) -> pynng.TLSConfig:
    """The daemon's side of TLS: its certificate chain and private key (PEM files)."""
    return pynng.TLSConfig(
        pynng.TLSConfig.MODE_SERVER, own_cert_string=_read(cert_file), own_key_string=_read(key_file)
    )


def client_tls(
    ca_file: str, cert_file: str | None = None, key_file: str | None = None, server_name: str | None = None
) -> pynng.TLSConfig:
    """A client's side: the CA that signed the daemon's certificate (the server is
    always verified), and optionally the client's own certificate."""
    return pynng.TLSConfig(
        pynng.TLSConfig.MODE_CLIENT,
        server_name=server_name,
        ca_string=_read(ca_file),
        own_cert_string=_read(cert_file) if cert_file else None,
        own_key_string=_read(key_file) if key_file else None,
        auth_mode=pynng.TLSConfig.AUTH_MODE_REQUIRED,
    )


def _read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read()


def _listen(sock: pynng.Socket, url: str) -> None:
    """Listen; an ipc socket file is born owner-only (no window where others can connect)."""
    check_url(url)
    old = os.umask(0o177)
    try:
        sock.listen(url)
    finally:
        os.umask(old)


# -- waiting in the caller's event loop ---------------------------------------------------


def _wait_readable() -> Callable[[int], Any]:
    """How to wait for a descriptor in the running event loop: trio's own function
    inside trio (anyio's looks the backend up on every call), anyio's elsewhere."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return anyio.wait_readable  # another event loop (asyncio)
    return trio.lowlevel.wait_readable


class _Loop:
    """The running loop's clock, deadline scope and descriptor wait: trio's own inside
    trio (an anyio scope wraps trio's and costs half as much again), anyio's elsewhere."""

    __slots__ = ("clock", "if_cancelled", "scope", "wait_readable")

    def __init__(self) -> None:
        self.wait_readable = _wait_readable()
        inside_trio = self.wait_readable is trio.lowlevel.wait_readable
        self.clock: Callable[[], float] = trio.current_time if inside_trio else anyio.current_time
        self.scope: Callable[..., Any] = trio.CancelScope if inside_trio else anyio.CancelScope
        self.if_cancelled: Callable[[], Awaitable[None]] = (
            trio.lowlevel.checkpoint_if_cancelled if inside_trio else anyio.lowlevel.checkpoint_if_cancelled
        )


@contextlib.contextmanager
def _deadline(loop: _Loop, deadline: float) -> Iterator[None]:
    """`TimeoutError` if the block is still waiting at `deadline` (as `fail_after`)."""
    with loop.scope(deadline=deadline) as scope:
        yield
    if scope.cancelled_caught:
        raise TimeoutError


def try_send(sock: pynng.Socket, data: bytes) -> bool:
    """Send if the socket can take it now; never waits. (nng directly: pynng's `send`
    raises an exception for a full queue, which costs more than the send.)"""
    err = lib.nng_send(sock.socket, data, len(data), lib.NNG_FLAG_NONBLOCK)
    if not err:
        return True
    if err == lib.NNG_EAGAIN:
        return False
    pynng.check_err(err)
    return False


async def send(sock: pynng.Socket, data: bytes) -> None:
    """Send, waiting while the socket cannot take the message (nng's send descriptor
    turns *readable* when it can). Cancelling it leaves nothing behind: nng copies
    the message only when it takes it."""
    wait = None
    while not try_send(sock, data):
        if wait is None:
            wait = _wait_readable()
        await wait(sock.send_fd)


async def _asend(obj: pynng.Socket | pynng.Context, data: bytes) -> None:
    """pynng's awaitable send, minus its leak: a cancelled send's message is freed."""
    with _aio.AIOHelper(obj, None) as helper:
        try:
            await helper.asend(data)
        except BaseException:
            msg = lib.nng_aio_get_msg(helper.aio)
            if msg != ffi.NULL:
                lib.nng_aio_set_msg(helper.aio, ffi.NULL)
                lib.nng_msg_free(msg)
            raise


class Receiver:
    """Takes messages off a socket by waiting on its readiness descriptor in the event
    loop itself, with nng's non-blocking receive and buffers kept from call to call
    (pynng's `recv` allocates two and raises an exception when nothing is queued).
    Only for sockets used without contexts."""

    __slots__ = ("_data", "_handle", "_size", "_wait", "fd", "sock")

    def __init__(self, sock: pynng.Socket) -> None:
        self.sock = sock
        self.fd = sock.recv_fd
        self._handle = sock.socket
        self._data = ffi.new("char **")
        self._size = ffi.new("size_t *")
        self._wait: Callable[[int], Any] | None = None

    def ready(self) -> bytes | None:
        """A message if one is queued, else None."""
        err = lib.nng_recv(self._handle, self._data, self._size, _ALLOC_NONBLOCK)
        if err:
            if err == lib.NNG_EAGAIN:
                return None
            pynng.check_err(err)
        data, size = self._data[0], self._size[0]
        try:
            return ffi.unpack(data, size) if size else b""
        finally:
            if data != ffi.NULL:
                lib.nng_free(data, size)

    def ready_many(self, limit: int = 64) -> list[bytes]:
        """Up to `limit` messages already queued (maybe none)."""
        out: list[bytes] = []
        while len(out) < limit:
            data = self.ready()
            if data is None:
                break
            out.append(data)
        return out

    async def recv(self) -> bytes:
        while True:
            data = self.ready()
            if data is not None:
                return data
            if self._wait is None:
                self._wait = _wait_readable()
            await self._wait(self.fd)

    async def recv_many(self, limit: int = 64) -> list[bytes]:
        """At least one message, and whatever else is already queued, up to `limit`."""
        first = await self.recv()
        return [first, *self.ready_many(limit - 1)]

    async def wait_many(self, limit: int = 64) -> list[bytes]:
        """`recv_many` for a caller that has just found nothing queued: it waits first
        (a receive that finds nothing costs nng's locks, about 3 µs)."""
        if self._wait is None:
            self._wait = _wait_readable()
        await self._wait(self.fd)
        return await self.recv_many(limit)


# -- the daemon's side ----------------------------------------------------------------


class ConnectionGate:
    """Bounds the connections of one listening socket.

    A connection past `max_connections`, or one that would leave fewer than
    `fd_reserve` free descriptors (so a worker can always be restarted), is closed
    as soon as it is made; the established ones never notice. nng calls this from
    its own threads, hence the lock; `on_gone(pipe id)` is handed to the trio loop."""

    def __init__(
        self,
        sock: pynng.Socket,
        name: str,
        max_connections: int,
        fd_reserve: int,
        on_gone: Callable[[int], None] | None = None,
    ) -> None:
        self.name = name
        self.max_connections = max_connections
        self.fd_reserve = fd_reserve
        self.open: set[int] = set()
        self.refused = 0
        self._lock = threading.Lock()
        self._on_gone = on_gone
        self._token = _trio_token()
        self._fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        sock.add_pre_pipe_connect_cb(self._admit)
        sock.add_post_pipe_remove_cb(self._removed)

    def _admit(self, pipe: pynng.Pipe) -> None:
        with self._lock:
            if len(self.open) >= self.max_connections:
                why = f"{self.max_connections} connections already open"
            elif _fds_short(self._fd_limit, self.fd_reserve):
                why = f"fewer than {self.fd_reserve} file descriptors left"
            else:
                self.open.add(pipe.id)
                return
            self.refused += 1
            refused = self.refused
        pipe.close()
        if refused == 1 or refused % 1000 == 0:
            log.warning("%s endpoint refused a connection (%s); %d refused so far", self.name, why, refused)

    def _removed(self, pipe: pynng.Pipe) -> None:
        with self._lock:
            if pipe.id not in self.open:
                return
            self.open.discard(pipe.id)
        if self._on_gone is not None and self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):  # the loop has ended: nobody to tell
                self._token.run_sync_soon(self._on_gone, pipe.id)


def _trio_token() -> Any:
    try:
        return trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None  # not made inside trio: nobody to hand "gone" to


def _fds_short(limit: int, reserve: int) -> bool:
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError as exc:
        # Listing needs a descriptor of its own: none left is the clearest answer.
        return exc.errno in (errno.EMFILE, errno.ENFILE)
    return used > limit - reserve


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft limit on open descriptors to the hard limit; (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft, hard


def peer_address(pipe_id: int) -> str:
    """Where a connection comes from (`203.0.113.7:51234`; the socket path over ipc),
    by the id of its pipe; a placeholder once it has closed."""
    pipe = ffi.new("nng_pipe *")
    pipe[0].id = pipe_id
    addr = ffi.new("nng_sockaddr []", 1)
    if lib.nng_pipe_get_addr(pipe[0], b"remote-address", addr):
        return "(a connection already closed)"
    return str(pynng.sockaddr._nng_sockaddr(addr))


class ControlServer:
    """The control endpoint: Rep0 in raw mode (see the module's docstring)."""

    def __init__(
        self,
        url: str,
        *,
        max_size: int,
        max_connections: int,
        fd_reserve: int,
        tls: pynng.TLSConfig | None = None,
        on_gone: Callable[[int], None] | None = None,
    ) -> None:
        self.url = url
        # Slack over the limit so that a request just past it still arrives and gets its
        # typed error; nng closes the connection of anything larger.
        self.sock = pynng.Rep0(
            opener=lib.nng_rep0_open_raw,
            recv_max_size=max_size + 64 * 1024,
            send_buffer_size=1024,
            recv_buffer_size=1024,
        )
        try:
            if tls is not None:
                self.sock.tls_config = tls
            self.gate = ConnectionGate(self.sock, "control", max_connections, fd_reserve, on_gone)
            _listen(self.sock, url)
        except BaseException:
            self.sock.close()
            raise
        self.fd = self.sock.recv_fd
        self._send_fd = self.sock.send_fd
        self._handle = self.sock.socket
        self._msg_p = ffi.new("nng_msg **")
        self._reply_p = ffi.new("nng_msg **")  # kept: one allocation per reply less
        self._waiting: list[tuple[bytes, bytes]] = []  # replies nng could not take at once
        self._flusher = False

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
        """(request body, its routing header, the id of the connection it came on)."""
        while True:
            got = self._take()
            if got is not None:
                return got
            await trio.lowlevel.wait_readable(self.fd)

    def _try_reply(self, header: bytes, body: bytes) -> bool:
        msg_p = self._reply_p
        pynng.check_err(lib.nng_msg_alloc(msg_p, 0))
        msg = msg_p[0]
        err = lib.nng_msg_header_append(msg, header, len(header)) or lib.nng_msg_append(msg, body, len(body))
        if not err:
            err = lib.nng_sendmsg(self._handle, msg, lib.NNG_FLAG_NONBLOCK)
            if not err:
                return True
        lib.nng_msg_free(msg)
        if err == lib.NNG_EAGAIN:
            return False
        pynng.check_err(err)
        return True

    def reply(self, header: bytes, body: bytes, nursery: Any) -> None:
        """Answer the request that came with `header`. nng routes it to its connection
        (dropping it if that client has gone, or holds 64 unread replies already); only
        when nng's own queue is momentarily full does it wait here, in order."""
        if not self._waiting and self._try_reply(header, body):
            return
        self._waiting.append((header, body))
        if not self._flusher:
            self._flusher = True
            nursery.start_soon(self._flush)

    async def _flush(self) -> None:
        try:
            while self._waiting:
                header, body = self._waiting[0]
                if self._try_reply(header, body):
                    self._waiting.pop(0)
                else:
                    await trio.lowlevel.wait_readable(self._send_fd)
        except (pynng.Closed, trio.ClosedResourceError):
            self._waiting.clear()
        finally:
            self._flusher = False

    def close(self) -> None:
        self.sock.close()


class EventPublisher:
    """The event endpoint: Pub0. `publish` never waits (see the module's docstring)."""

    def __init__(
        self, url: str, *, queue: int, max_connections: int, fd_reserve: int, tls: pynng.TLSConfig | None = None
    ) -> None:
        self.url = url
        self.sock = pynng.Pub0(send_buffer_size=min(max(queue, 1), MAX_QUEUE))
        try:
            if tls is not None:
                self.sock.tls_config = tls
            self.gate = ConnectionGate(self.sock, "events", max_connections, fd_reserve)
            _listen(self.sock, url)
        except BaseException:
            self.sock.close()
            raise
        self._handle = self.sock.socket

    @property
    def subscribers(self) -> int:
        return len(self.gate.open)

    def publish(self, frame: bytes) -> None:
        lib.nng_send(self._handle, frame, len(frame), lib.NNG_FLAG_NONBLOCK)

    def publish_many(self, messages: list[bytes]) -> None:
        send, handle, flag = lib.nng_send, self._handle, lib.NNG_FLAG_NONBLOCK
        for message in messages:
            send(handle, message, len(message), flag)

    def close(self) -> None:
        self.sock.close()


# -- the client's side ----------------------------------------------------------------


def _dial(sock: pynng.Socket, url: str, tls: pynng.TLSConfig | None) -> None:
    check_url(url)
    if tls is not None:
        sock.tls_config = tls
    try:
        sock.dial(url, block=True)
    except BaseException:
        sock.close()
        raise


class Requester:
    """A client's control socket: Req0 that never resends (nng's Req0 would, after
    60 s, even to a restarted daemon: a duplicate LLM call).

    Quick calls take turns on the socket's own context and wait on its readiness
    descriptors (no thread hop); a call while another is in progress, or one that
    may take long (`ready`, `count_tokens`), gets an nng context of its own, so no
    call holds up another."""

    def __init__(self, url: str, tls: pynng.TLSConfig | None = None) -> None:
        # The daemon's raw Rep0 holds at most 64 unsent replies per connection and drops
        # the rest (the bound that protects it from clients that never read): a client
        # keeps fewer calls than that in flight, or a busy moment could lose a reply.
        self._slots: Any = None  # made in the event loop, at the first call
        self.sock = pynng.Req0(resend_time=-1, reconnect_time_min=10, reconnect_time_max=500, recv_max_size=0)
        #: Connections made so far: one more than before means nng reconnected (a
        #: restarted daemon, or a dropped network connection).
        self.connects = 0
        #: Connections lost so far: the daemon cancels a connection's requests when it
        #: goes, so a client fails its own at once rather than wait for their silence.
        self.drops = 0
        self.sock.add_post_pipe_connect_cb(self._connected)
        self.sock.add_post_pipe_remove_cb(self._dropped)
        _dial(self.sock, url, tls)
        self._receiver = Receiver(self.sock)
        self._busy = False
        self._loop: _Loop | None = None  # the event loop's functions, found at the first call

    def _connected(self, pipe: pynng.Pipe) -> None:
        self.connects += 1  # from nng's thread; an int store is atomic under the GIL

    def _dropped(self, pipe: pynng.Pipe) -> None:
        self.drops += 1  # from nng's thread, as above

    async def call(self, data: bytes, slow: bool = False, timeout_s: float | None = None) -> bytes:
        """The reply to `data`; `TimeoutError` when none came within `timeout_s`.

        A quick call costs one deadline scope, the wait for its reply: taking a slot
        and sending wait only when they must (the wait for the reply is the call's
        checkpoint), each under the call's one deadline."""
        loop = self._loop
        if loop is None:
            loop = self._loop = _Loop()
            self._slots = anyio.Semaphore(MAX_CALLS_IN_FLIGHT)
        await loop.if_cancelled()  # a caller already cancelled sends nothing (this does not yield otherwise)
        deadline = loop.clock() + timeout_s if timeout_s is not None else math.inf
        slots = self._slots
        try:
            slots.acquire_nowait()
        except anyio.WouldBlock:
            with _deadline(loop, deadline):
                await slots.acquire()
        try:
            if slow or self._busy:
                with _deadline(loop, deadline), self.sock.new_context() as ctx:
                    await _asend(ctx, data)
                    reply: bytes = await ctx.arecv()
                    return reply
            self._busy = True
            try:
                if not try_send(self.sock, data):
                    with _deadline(loop, deadline):
                        await send(self.sock, data)
                return await self._reply(loop, deadline)
            finally:
                self._busy = False
        finally:
            slots.release()

    async def _reply(self, loop: _Loop, deadline: float) -> bytes:
        # A connection lost while we wait fails the call with ECONNRESET (no resends),
        # but nng may not mark the descriptor readable for it: look again now and then.
        # The reply cannot be there yet (it is a round trip away): wait, then look.
        receiver = self._receiver
        while True:
            now = loop.clock()
            if now >= deadline:
                raise TimeoutError
            with loop.scope(deadline=min(deadline, now + RESET_POLL_S)):
                await loop.wait_readable(receiver.fd)
            data = receiver.ready()
            if data is not None:
                return data

    def close(self) -> None:
        self.sock.close()


class Subscriber:
    """A client's event socket: Sub0 with nng's largest queue (a slow reader loses its
    oldest messages, and finds out by `seq`)."""

    def __init__(self, url: str, topics: tuple[bytes, ...], tls: pynng.TLSConfig | None = None) -> None:
        self.sock = pynng.Sub0(
            recv_buffer_size=MAX_QUEUE, reconnect_time_min=10, reconnect_time_max=500, recv_max_size=0
        )
        for topic in topics:
            self.sock.subscribe(topic)
        _dial(self.sock, url, tls)
        self.receiver = Receiver(self.sock)

    def subscribe(self, topic: bytes) -> None:
        self.sock.subscribe(topic)

    def close(self) -> None:
        self.sock.close()


__all__ = [
    "AddressInUse",
    "Closed",
    "ConnectionGate",
    "ConnectionRefused",
    "ControlServer",
    "EventPublisher",
    "NNGException",
    "Receiver",
    "Requester",
    "Subscriber",
    "check_url",
    "client_tls",
    "ipc_path",
    "is_remote",
    "is_tls",
    "peer_address",
    "raise_fd_limit",
    "scheme",
    "server_tls",
    "try_send",
]
