"""The front door's ASGI application: routes, keys, bounds and hang-ups.

Each API is an `Endpoint`: it reads its JSON body into a canonical `Request`
(`parse`), writes a whole response in its own form (`whole`), and turns the
canonical events of a stream into its own server-sent events (`streamer`). The
application does the rest the same way for every API:

* a key, when keys are configured, as `Authorization: Bearer` or `x-api-key`,
  compared in constant time;
* the body read within `http.max_body_bytes` (413 past it);
* the call: one `submit` to the daemon, then its events in order; a stream's
  response head waits for the first event, so a call refused or failed before
  any output is an error with its own status, not a stream that fails at once;
* a client that hangs up cancels the call (the daemon stops the provider's);
* every error in the API's own shape and status (`errors.py`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import msgspec

from ..client import Client
from ..errors import DaemonUnavailable, TrunklineError
from ..protocol.messages import (
    ErrorEvent,
    ErrorInfo,
    Finish,
    Request,
    Response,
    StreamEvent,
)
from ..protocol.ratelog import RateLimitedLog
from .errors import Family, HttpError, body_of, encode, headers_of, refuse, status_of

log = logging.getLogger("trunkline.frontdoor")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class HungUp(Exception):
    """The client went away before its request had been read whole."""


class Headers:
    """A request's headers by lower-case name (the last value of a repeated one)."""

    __slots__ = ("_values",)

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        self._values = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in raw}

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._values.get(name, default)


@dataclass
class Parsed:
    """A request as an endpoint read it: the canonical request, whether the client
    asked for a stream, the model as the client named it (echoed back in responses),
    and what else the endpoint needs to answer in kind."""

    request: Request
    stream: bool
    model: str
    extra: dict[str, Any] = field(default_factory=dict)


class Streamer(Protocol):
    """One stream's events in an API's own form."""

    def events(self, event: StreamEvent) -> list[bytes]:
        """The bytes for one canonical event (none, one or several SSE events)."""
        ...

    def error(self, info: ErrorInfo, status: int) -> list[bytes]:
        """How the API streams an error once its stream has begun."""
        ...

    def end(self) -> list[bytes]:
        """What follows the terminal event (OpenAI's `[DONE]`)."""
        ...


class Endpoint(Protocol):
    family: Family

    def parse(self, body: Any, headers: Headers) -> Parsed:
        """The canonical request (raise `HttpError` for what cannot be translated)."""
        ...

    def whole(self, response: Response, parsed: Parsed) -> Any:
        """The JSON body of a whole (non-streamed) response."""
        ...

    def streamer(self, parsed: Parsed) -> Streamer: ...


@dataclass
class Limits:
    max_body_bytes: int = 16 * 1024 * 1024


class Keys:
    """The keys a request may bring; none configured: none asked for. `keys`: unnamed
    keys (`http.keys_*`); `named`: the named client keys (`clients:`) by name, whose
    name goes to the daemon with each request. Each is compared as a digest, every key
    every time, so the time taken says nothing of a key."""

    def __init__(self, keys: list[str], named: dict[str, str] | None = None) -> None:
        self._digests = [(hashlib.sha256(k.encode()).digest(), "") for k in keys]
        self._digests += [(hashlib.sha256(k.encode()).digest(), name) for name, k in (named or {}).items()]

    @property
    def required(self) -> bool:
        return bool(self._digests)

    def allows(self, headers: Headers) -> bool:
        return self.who(headers) is not None

    def who(self, headers: Headers) -> str | None:
        """The name of the named key the request brings, "" for an unnamed key (or when
        none is asked for), None when it brings no valid key."""
        if not self._digests:
            return ""
        given = headers.get("x-api-key")
        authorization = headers.get("authorization")
        if given is None and authorization is not None:
            scheme, _, token = authorization.partition(" ")
            given = token.strip() if scheme.lower() == "bearer" else None
        if not given:
            return None
        digest = hashlib.sha256(given.encode()).digest()
        found: str | None = None
        for known, name in self._digests:
            if hmac.compare_digest(digest, known):
                found = name
        return found


@dataclass(frozen=True, slots=True)
class Route:
    """What answers a method and path, and the API family its errors speak (None: the
    one the request's headers suggest)."""

    handler: Callable[[Exchange], Awaitable[None]]
    family: Family | None = None


class FrontDoor:
    """The ASGI application (`hypercorn` serves it)."""

    def __init__(
        self,
        client: Client,
        routes: dict[tuple[str, str], Route],
        keys: Keys,
        limits: Limits,
    ) -> None:
        self.client = client
        self.routes = routes
        self.keys = keys
        self.limits = limits
        self.fault_log = RateLimitedLog(log)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = Headers(scope.get("headers") or [])
        route = self.routes.get((scope["method"], scope["path"].rstrip("/")))
        # Errors in the words of the API the path belongs to; where a path serves both (the
        # model list, an unknown path), in those the headers suggest.
        family: Family | None = route.family if route is not None else None
        if family is None:
            family = "anthropic" if headers.get("anthropic-version") or headers.get("x-api-key") else "openai"
        exchange = Exchange(self, scope, receive, send, headers, family)
        try:
            if route is None:
                known = {path for _, path in self.routes}
                if scope["path"].rstrip("/") in known:
                    raise refuse(f"{scope['method']} is not allowed on {scope['path']}", status=405)
                raise refuse(f"no such endpoint: {scope['method']} {scope['path']}", "not_found")
            if scope["path"] != "/health":
                who = self.keys.who(headers)
                if who is None:
                    raise refuse("a valid key is needed (Authorization: Bearer <key>, or x-api-key)", "authentication")
                exchange.client_key = who or None
            await route.handler(exchange)
        except HttpError as exc:
            await exchange.fail(exc.info, exc.status, exc.param)
        except HungUp:
            return  # nobody to answer
        except Exception as exc:
            self.fault_log.note(f"{scope['method']} {scope['path']} failed: {type(exc).__name__}: {str(exc)[:200]}")
            log.debug("request failed", exc_info=exc)
            await exchange.fail(
                ErrorInfo(
                    error_class="other",
                    retryable=False,
                    message=(f"the front door failed on this request ({type(exc).__name__})"),
                )
            )


class Exchange:
    """One HTTP request and its response, for an endpoint's handler."""

    def __init__(
        self, door: FrontDoor, scope: Scope, receive: Receive, send: Send, headers: Headers, family: Family
    ) -> None:
        self.door = door
        self.scope = scope
        self.receive = receive
        self._send = send
        self.headers = headers
        self.family = family
        self.started = False  # the response head went out
        #: The name of the named client key the request came with (None: an unnamed key, or none).
        self.client_key: str | None = None

    # -- the request ---------------------------------------------------------------

    async def body(self) -> bytes:
        """The whole body, within the limit (413 past it)."""
        limit = self.door.limits.max_body_bytes
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise refuse(f"the request body of {declared} bytes is over the limit of {limit}", status=413)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise HungUp
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise refuse(f"the request body is over the limit of {limit} bytes", status=413)
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def json(self) -> Any:
        raw = await self.body()
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise refuse(f"the request body is not JSON: {exc}") from None

    # -- the response --------------------------------------------------------------

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def write(self, data: bytes, more: bool = True) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": more})

    async def send_json(self, body: Any, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        data = encode(body)
        # With its length said, the body is not chunked: no terminating chunk written (and
        # read) on its own after it.
        length = (b"content-length", str(len(data)).encode())
        await self.start(status, [*_JSON, length, *(headers or [])])
        await self.write(data, more=False)

    async def fail(self, info: ErrorInfo, status: int | None = None, param: str | None = None) -> None:
        """The error as the API says it, if the response has not begun."""
        if self.started:
            return
        status = status or status_of(info, self.family)
        await self.send_json(body_of(info, self.family, status, param), status, headers_of(info))

    # -- the call ------------------------------------------------------------------

    async def run(self, endpoint: Endpoint) -> None:
        """Parse, call the daemon, answer: whole or streamed. A hang-up cancels the call."""
        self.family = endpoint.family
        parsed = endpoint.parse(await self.json(), self.headers)
        refused: HttpError | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch_hang_up, group.cancel_scope)
            try:
                if parsed.stream:
                    await self._stream(endpoint, parsed)
                else:
                    await self._whole(endpoint, parsed)
            except HttpError as exc:
                refused = exc  # raised outside the group, not wrapped in one
            finally:
                group.cancel_scope.cancel()
        if refused is not None:
            raise refused

    async def _watch_hang_up(self, scope: anyio.CancelScope) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return

    async def _whole(self, endpoint: Endpoint, parsed: Parsed) -> None:
        client = self.door.client
        try:
            _, route = await client.submit(parsed.request, stream=False, client_key=self.client_key)
        except TrunklineError as exc:
            raise HttpError(exc.info) from None
        except DaemonUnavailable as exc:
            raise refuse(f"the daemon is not answering: {exc}", "unavailable") from None
        try:
            async for ev in route.events():
                if isinstance(ev, Finish):
                    await self.send_json(endpoint.whole(ev.response, parsed))
                    return
                if isinstance(ev, ErrorEvent):
                    raise HttpError(ev.error)
        finally:
            await _cancel_unless_done(client, route)

    async def _stream(self, endpoint: Endpoint, parsed: Parsed) -> None:
        client = self.door.client
        try:
            _, route = await client.submit(parsed.request, stream=True, client_key=self.client_key)
        except TrunklineError as exc:
            raise HttpError(exc.info) from None
        except DaemonUnavailable as exc:
            raise refuse(f"the daemon is not answering: {exc}", "unavailable") from None
        streamer = endpoint.streamer(parsed)
        try:
            while (first := await route.next_event()) is not None:
                if not self.started:
                    if isinstance(first, ErrorEvent):  # failed before any output: a plain error answer
                        raise HttpError(first.error)
                    await self.start(200, _SSE)
                # Every event already here goes out in one write: the socket write (and
                # the client's read) per event was most of the door's cost per chunk.
                out: list[bytes] = []
                for ev in (first, *route.ready()):
                    if isinstance(ev, ErrorEvent):
                        out += streamer.error(ev.error, status_of(ev.error, self.family))
                    else:
                        out += streamer.events(ev)
                if route.done and not route.queue:
                    out += streamer.end()  # the last bytes ride with the terminal event's
                    await self.write(b"".join(out), more=False)
                    return
                if out:
                    await self.write(b"".join(out))
            await self.write(b"".join(streamer.end()), more=False)
        finally:
            await _cancel_unless_done(client, route)


async def _cancel_unless_done(client: Client, route: Any) -> None:
    """The call ends with the exchange: a client that hung up (or a failure here)
    cancels what the daemon is still running for it."""
    if route.done:
        return
    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
        try:
            await client.cancel(route.request_id)
        except (DaemonUnavailable, OSError, TrunklineError) as exc:
            log.debug("cancel of %s failed: %s", route.request_id, exc)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
