"""The HTTP half of the runtime: one pooled httpx client per worker, and the two
ways of calling a provider (a JSON reply, or a stream of chunks).

Every provider that speaks HTTP subclasses `HttpAdapter` and supplies its pure
parts; every streamed attempt goes through `run_stream`, which sends the built
request (and the requests that continue it, `Leg`s) and feeds the bodies through
the pipeline. This module turns status codes, transport failures, silence and
cancellation into the same `ProviderError`s and guarantees that a cancelled or
failed stream closes its connection at once.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import msgspec
import trio

from ..config import hosts
from ..protocol import __version__
from ..protocol.messages import RateLimit, Response
from ._adapter import Adapter, Call, Emit, consume, went_silent
from ._body import BodyDecoder
from ._contract import Built, Framing, Pipeline, StreamTranslator
from ._replay import events_of, skeleton_of
from ._tls import client_context
from .errors import ProviderError, from_transport, invalid_response

USER_AGENT = f"trunkline/{__version__}"
log = logging.getLogger("trunkline.worker")

#: Idle connections kept open per worker. httpcore checks every pooled connection (a
#: readability poll for each idle one) on every request and every release, so the pool
#: cost grows with its idle connections. Measured at 64 requests in flight: 8.3 ms of
#: the worker's CPU per request with 1,200 allowed to idle, 2.4 ms with 16 (and three
#: times the requests/s). Busy connections are never limited by this.
KEEPALIVE_MAX = 16
#: How long closing one idle connection may take (a TLS close_notify to a peer that
#: stopped reading): it is closed on our side whatever happens.
TRIM_CLOSE_S = 1.0
#: Most of an error body (or of a body of the wrong kind) read, to explain the failure.
EXCERPT_BYTES = 64 * 1024
#: We inflate bodies ourselves, bounded (`_body.py`): only these encodings are asked for.
ACCEPT_ENCODING = "gzip, deflate"


class _Enough(Exception):
    """An excerpt has all the bytes it wants: stop reading."""


@dataclass(frozen=True, slots=True)
class Leg:
    """One HTTP request of a streamed attempt: its first, or one that continues it (the
    next hop of Gemini's long decode, OpenAI's resumed background stream)."""

    path: str
    body: dict[str, Any] | None = None  # None: a GET of something the provider keeps
    headers: dict[str, str] = field(default_factory=dict)


#: What decides, once a leg has ended (cleanly: None; else its error), the leg that
#: continues the attempt; None: the attempt is over (the error, if any, is raised).
Follow = Callable[[ProviderError | None], Leg | None]


class HttpAdapter(Adapter):
    """Base of the adapters that call an HTTP API."""

    default_base_url = ""
    #: Header carrying the operation id, stable across retries (None: the provider has none).
    idempotency_header: str | None = "Idempotency-Key"

    def __init__(self, *args: Any, transport: httpx.AsyncBaseTransport | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base_url = (self.config.resolved_base_url() or self.default_base_url).rstrip("/")
        t = self.timeouts
        limits = httpx.Limits(
            max_connections=self.config.max_connections,
            max_keepalive_connections=min(self.config.max_connections, KEEPALIVE_MAX),
            keepalive_expiry=60.0,
        )
        # Reads are bounded by the stream idle timeout; the whole request by the runtime's deadline.
        timeout = httpx.Timeout(connect=t.connect_s, read=t.stream_idle_s, write=t.connect_s, pool=t.connect_s)
        # Provider calls go straight to the connection pool (the client shares it): the
        # client's per-request work (URL merging, cookie jar, auth and redirect
        # wrappers) cost about a quarter of the CPU of a small call, and an LLM API
        # needs none of it. Through an environment proxy they take the client's path
        # (httpx applies environment proxies only to a client that builds its own pool).
        self._direct = transport is not None or not _proxied(self.base_url)
        # One TLS context per process (`_tls`): a forked worker finds it built.
        tls = client_context()
        self.transport = (transport or httpx.AsyncHTTPTransport(limits=limits, verify=tls)) if self._direct else None
        self.client = httpx.AsyncClient(
            transport=self.transport,
            verify=tls,
            limits=limits,
            timeout=timeout,
            headers={"user-agent": USER_AGENT, "accept-encoding": ACCEPT_ENCODING, **self.config.headers},
            follow_redirects=False,
        )
        self._base_headers = {
            "user-agent": USER_AGENT,
            "accept": "*/*",
            "accept-encoding": ACCEPT_ENCODING,
            **{k.lower(): v for k, v in self.config.headers.items()},
        }
        self._timeout = timeout.as_dict()
        self._urls: dict[str, httpx.URL] = {}
        #: At most `max_connections` calls inside httpcore's pool at once; the others wait
        #: here, in order. httpcore's own queue is matched against every connection at each
        #: request and release: with 256 jobs over 100 connections each one cost a worker
        #: 14 ms of CPU, against 2.7 ms with connections enough for all.
        self._slots = trio.Semaphore(self.config.max_connections)
        #: Each key's credentials header, by key index, made once (the pool is shared; only
        #: the header differs between the jobs of two keys).
        self._auth = [self.credentials(key) if key else {} for key in self.keys.values] or [{}]

    # -- what a provider supplies ----------------------------------------------------

    def credentials(self, key: str) -> dict[str, str]:
        """The header that carries `key` (never logged)."""
        return {}

    def auth_headers(self, call: Call | None = None) -> dict[str, str]:
        """Credentials for a request: the call's key, else (outside jobs) the provider's first."""
        if call is not None:
            return self._auth[call.key_index]
        return self.credentials(self.api_key) if self.api_key else {}

    def classify(self, status: int, headers: httpx.Headers, body: bytes) -> ProviderError:
        """An error response as a ProviderError (each provider's `errors.classify`)."""
        raise NotImplementedError

    def rate_limit(self, headers: httpx.Headers) -> RateLimit | None:
        return None

    # -- calling -----------------------------------------------------------------------

    def headers_for(self, call: Call, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"content-type": "application/json", **self._auth[call.key_index]}
        if self.idempotency_header:
            headers[self.idempotency_header] = idempotency_key(call.operation_id)
        if extra:
            headers.update(extra)
        return headers

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    @asynccontextmanager
    async def _send(
        self,
        path: str,
        body: dict[str, Any] | None,
        headers: dict[str, str],
        read_s: float | None = None,
        call: Call | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """POST `body` (GET without one); the response's body is read by the caller, and
        closed on the way out, or, for a `call` whose job hands its connection back after
        its reply (`Call.defer_close`), left to that job (`Call.deferred`). `read_s`: the
        bound on each read, when the call's stream idle timeout is not the provider's (a
        request or a reload set its own)."""
        if call is not None and call.deferred is not None:
            await call.settle()  # an earlier leg's connection goes back before this one takes a place
        method = "GET" if body is None else "POST"
        content = None if body is None else msgspec.json.encode(body)
        timeout = self._timeout
        if read_s is not None and read_s != timeout["read"]:
            timeout = {**timeout, "read": read_s}
        await self._take_slot()
        handed = False  # the slot is released by the deferred close
        try:
            if not self._direct:
                async with self.client.stream(
                    method, self.url(path), content=content, headers=headers, timeout=httpx.Timeout(**timeout)
                ) as response:
                    yield response
                return
            url = self._urls.get(path)
            if url is None:
                url = httpx.URL(self.url(path))
                if body is not None:  # a GET's path names one response: not worth keeping
                    self._urls[path] = url
            request = httpx.Request(
                method,
                url,
                headers={**self._base_headers, **headers},
                content=content,
                extensions={"timeout": timeout},
            )
            assert self.transport is not None
            response = await self.transport.handle_async_request(request)
            response.request = request
            try:
                yield response
            except BaseException:
                await response.aclose()
                raise
            if call is not None and call.defer_close and self.jobs_running() <= 1:
                # Handing the connection back (httpcore's lock, the pool's bookkeeping) once
                # the terminal event is out, not before it: the job does it then, in its own
                # task (a task of its own for it cost the worker 125,000 instructions per
                # small request: 2.90 M against 2.78 M). Only when no other job runs: one
                # starting meanwhile would find the connection still taken and open another
                # (at 256 in flight the pool grew from 18 to 86).
                call.deferred = partial(self._close, response)
                handed = True
            else:
                await response.aclose()
        finally:
            if not handed:
                self._slots.release()

    async def _take_slot(self) -> None:
        """A place among the `max_connections` calls in the pool, waited for at most the
        pool timeout (as httpcore's own wait for a connection was); then a `timeout`
        error, the request never sent."""
        try:
            self._slots.acquire_nowait()
            return
        except trio.WouldBlock:
            pass
        wait_s = self._timeout.get("pool")
        with trio.move_on_after(math.inf if wait_s is None else wait_s) as waited:
            await self._slots.acquire()
        if waited.cancelled_caught:
            raise ProviderError(
                "timeout",
                f"all {self.config.max_connections} connections to {self.name} stayed busy for {wait_s:g}s "
                f"(providers.{self.name}.max_connections)",
                sent=False,
            )

    async def _close(self, response: httpx.Response) -> None:
        try:
            await response.aclose()
        except Exception as exc:  # noqa: BLE001 - a connection that fails to close is dropped by the pool; the reply is out
            log.debug("%s: closing a read response failed: %r", self.name, exc)
        finally:
            self._slots.release()

    def _transport_error(self, exc: httpx.TransportError, path: str) -> ProviderError:
        error = from_transport(exc, self.name, self.url(path))
        if isinstance(exc, httpx.ConnectError) and self.is_loopback():
            # A server on this machine that does not accept connections is not running,
            # and will not start by itself during a backoff: say so at once.
            error.hold = ""
        return error

    def is_loopback(self) -> bool:
        """Whether the provider is reached on this machine (its connections go nowhere else)."""
        return hosts.is_this_machine(httpx.URL(self.base_url).host if self.base_url else "")

    def _rate_limit(self, response: httpx.Response) -> RateLimit | None:
        """The rate-limit headers; a `retry-after` means something only on a refusal."""
        info = self.rate_limit(response.headers)
        if info is not None and response.status_code < 400 and info.retry_after_s is not None:
            info.retry_after_s = None
            if not any(v is not None for v in msgspec.structs.astuple(info)):
                return None
        return info

    async def _read(self, response: httpx.Response, idle_s: float, cap: int | None = None) -> bytes:
        """The decompressed body. Past `max_response_bytes` an `invalid_response` error;
        with `cap`, at most `cap` bytes and the rest left unread (for error excerpts)."""
        decoder = BodyDecoder(response.headers.get("content-encoding"), self.max_response_bytes, self.name)
        pieces: list[bytes] = []
        size = 0

        def keep(chunk: bytes) -> None:
            nonlocal size
            for piece in decoder.feed(chunk):
                pieces.append(piece)
                size += len(piece)
                if cap is not None and size >= cap:
                    raise _Enough
            decoder.check()

        try:
            await consume(response.aiter_raw(), idle_s, self.name, keep)
            pieces += decoder.flush()
        except _Enough:
            pass
        except ProviderError:
            if cap is None:
                raise
        body = b"".join(pieces)
        return body[:cap] if cap is not None else body

    async def post_json(
        self, call: Call, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[Any, httpx.Headers]:
        """POST and return the decoded JSON reply, or raise the classified error."""
        idle = call.deadlines.stream_idle_s
        try:
            call.upstream_open = True
            async with self._send(path, body, self.headers_for(call, headers)) as response:
                call.rate_limit = self._rate_limit(response)
                if response.status_code >= 400:
                    raise await self.error_of(response, idle)
                call.answered = True
                content = await self._read(response, idle)
        except httpx.TransportError as exc:
            raise self._transport_error(exc, path) from None
        finally:
            call.upstream_open = False
        return self._json(content), response.headers

    async def get_json(self, path: str, headers: dict[str, str] | None = None, *, call: Call | None = None) -> Any:
        """GET, with the key of `call` when it is about a job's own upstream object (a
        background response made with that key: another project's key cannot see it)."""
        return await self._json_outside_job("GET", path, None, headers, call)

    async def post_simple(self, path: str, body: dict[str, Any], *, call: Call | None = None) -> Any:
        """POST outside any job's attempts (no retries, no idempotency key: a token
        count, a cancel) and return the decoded JSON, read within the response limit;
        with the key of `call` when it is about that job."""
        return await self._json_outside_job("POST", path, body, {"content-type": "application/json"}, call)

    async def _json_outside_job(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        headers: dict[str, str] | None,
        call: Call | None = None,
    ) -> Any:
        content_in = msgspec.json.encode(body) if body is not None else None
        try:
            async with self.client.stream(
                method, self.url(path), content=content_in, headers={**self.auth_headers(call), **(headers or {})}
            ) as response:
                idle = self.timeouts.stream_idle_s
                if response.status_code >= 400:
                    raise await self.error_of(response, idle)
                content = await self._read(response, idle)
        except httpx.TransportError as exc:
            raise from_transport(exc, self.name) from None
        try:
            return msgspec.json.decode(content)
        except msgspec.DecodeError:
            raise invalid_response(f"{self.name} sent a body that is not JSON: {content[:200]!r}") from None

    async def stream_leg(
        self,
        call: Call,
        leg: Leg,
        feed: Callable[[bytes], None],
        *,
        formats: tuple[str, ...] = ("event-stream",),
        whole: Callable[[bytes], None] | None = None,
    ) -> httpx.Headers:
        """Send `leg` and hand each decompressed piece of the streamed reply to `feed` as
        it arrives, never more than `max_response_bytes` in all.

        A reply whose content type names none of `formats` is not the stream asked
        for: an `invalid_response` error with an excerpt, unless it is JSON and
        `whole` takes it (a server that ignored `stream: true`). Silence longer than
        the stream idle timeout is a `timeout`; a cancel or an error leaves the
        `async with` and so closes the connection at once."""
        idle = call.deadlines.stream_idle_s
        # A GET carries no body, so no content type, and changes nothing: no idempotency key.
        headers = (
            self.headers_for(call, leg.headers) if leg.body is not None else {**self.auth_headers(call), **leg.headers}
        )
        try:
            async with self._send(leg.path, leg.body, headers, idle, call) as response:
                call.upstream_open = True
                call.rate_limit = self._rate_limit(response) or call.rate_limit
                if response.status_code >= 400:
                    raise await self.error_of(response, idle)
                call.answered = True
                kind = response.headers.get("content-type", "").lower()
                if kind and not any(f in kind for f in formats):
                    if whole is not None and "json" in kind:
                        whole(await self._read(response, idle))
                        return response.headers
                    excerpt = await self._read(response, idle, 200)
                    raise invalid_response(
                        f"{self.name} answered {response.status_code} with "
                        f"{response.headers.get('content-type')!r} where {formats[0]} was "
                        f"expected: {excerpt!r}"
                    )
                await self.read_stream(call, response, feed)
                return response.headers
        except httpx.TransportError as exc:
            raise self._transport_error(exc, leg.path) from None
        finally:
            call.upstream_open = False

    async def run_stream(
        self,
        call: Call,
        emit: Emit,
        whole: bool,
        *,
        built: Built,
        translator: StreamTranslator,
        path: str = "",
        framing: Framing = "sse",
        formats: tuple[str, ...] = ("event-stream",),
        whole_body: Callable[[Any], Response] | None = None,
        follow: Follow | None = None,
    ) -> Response:
        """One streamed attempt the way every provider runs it: send `built` (to `path`,
        else `built.path`), pass the body through the pipeline (decode, translate,
        emit), and return the finish skeleton. `follow` may continue the attempt with
        more legs, whose bodies go through the same pipeline and translator. When the
        server sends one JSON body instead and `whole_body` reads it (the body decoded:
        the response, or the provider's error), that response (see `answered_whole`)."""
        pipeline = Pipeline(translator, framing, emit, call.request.include_raw)
        parsed: list[Response] = []
        take = None if whole_body is None else (lambda content: parsed.append(whole_body(self._json(content))))
        leg: Leg | None = Leg(path or built.path, built.body, built.headers)
        while leg is not None:
            try:
                await self.stream_leg(call, leg, pipeline.feed, formats=formats, whole=take)
                if parsed:
                    return self.answered_whole(parsed[0], whole, emit)
                pipeline.flush()
            except ProviderError as err:
                leg = follow(err) if follow is not None else None
                if leg is None:
                    raise
            else:
                leg = follow(None) if follow is not None else None
            if leg is not None:
                pipeline.restart()  # a new body: what a cut event held comes again in it
        return pipeline.finish(call, self.name)

    def _json(self, content: bytes) -> Any:
        try:
            return msgspec.json.decode(content)
        except msgspec.DecodeError as exc:
            raise invalid_response(f"{self.name} sent a body that is not JSON ({exc}): {content[:200]!r}") from None

    def answered_whole(self, parsed: Response, whole: bool, emit: Emit) -> Response:
        """What `stream` returns when the server sent one JSON body instead of a stream:
        the response itself for a whole-response request; for a streamed one, its
        content is emitted as a stream's events and the skeleton returned."""
        if whole:
            return parsed
        for event in events_of(parsed):
            emit(event)
        return skeleton_of(parsed)

    async def read_stream(self, call: Call, response: httpx.Response, feed: Callable[[bytes], None]) -> None:
        """Hand each decompressed piece of a streamed body to `feed`: never more than
        `max_response_bytes` in all, silence bounded by the stream idle timeout, and no
        reading while the job's events wait in a full outbox (`call.backlog`)."""
        decoder = BodyDecoder(response.headers.get("content-encoding"), self.max_response_bytes, self.name)
        plain, limit = decoder.plain, decoder.limit

        def handle(chunk: bytes) -> None:
            if plain and chunk and decoder.total + len(chunk) <= limit:
                # Nothing to inflate and within the limit: the chunk itself, counted.
                decoder.total += len(chunk)
                feed(chunk)
                return
            for piece in decoder.feed(chunk):
                feed(piece)
            decoder.check()

        # The response's own stream, not `aiter_raw()`: the latter's per-chunk
        # bookkeeping (a chunker, a timing context, a byte count) is work nobody reads.
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream), "an async client's response"
        # Silence is bounded by httpcore's read timeout, which `stream_leg` set to the call's
        # stream idle timeout: each read of the body waits at most that long. So no cancel
        # scope of our own around the stream, as `consume` has: with it, a small whole
        # response cost the worker 73,000 instructions more (2.98 M against 2.90 M; the
        # skeleton's worker, 2.58 M). While the job's events wait in a full outbox,
        # nothing is read, so no read timeout runs: the wait is ours, not the provider's.
        backlog = call.backlog
        chunks = stream.__aiter__()
        try:
            async for chunk in chunks:
                handle(chunk)
                if backlog is not None and backlog.full:
                    await backlog.wait_room()
        except httpx.ReadTimeout:
            raise went_silent(self.name, call.deadlines.stream_idle_s) from None
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()
        for piece in decoder.flush():
            feed(piece)

    async def error_of(self, response: httpx.Response, idle_s: float) -> ProviderError:
        """An error response classified from at most `EXCERPT_BYTES` of its body."""
        return self.classify(response.status_code, response.headers, await self._read(response, idle_s, EXCERPT_BYTES))

    def is_local(self) -> bool:
        """A server on this machine or a private network (loopback, RFC 1918, link-local,
        unique-local IPv6), where a probe is cheap and a down server is worth reporting."""
        return hosts.is_local(httpx.URL(self.base_url).host if self.base_url else "")

    async def probe_path(self, path: str) -> str | None:
        try:
            response = await self.client.get(self.url(path), headers=self.auth_headers(), timeout=2.0)
        except httpx.TransportError as exc:
            return from_transport(exc, self.name).message
        return None if response.status_code < 500 else f"{self.name} answered HTTP {response.status_code}"

    async def trim_idle(self, keep: int) -> int:
        """Close the idle connections beyond `keep` (at least one stays), the least used
        first. httpcore walks every pooled connection on each request and each release
        (a readability poll per idle one, and a count of the pool per connection), so
        after a burst the connections it leaves idle for `keepalive_expiry` make each
        later request cost more: one request at a time through httpx, in-process, took
        1.09 ms of CPU with 16 idle against 0.88 ms with one. Closing an idle connection is safe from outside the
        pool: httpcore marks it closed before its first await and drops it from the
        pool at the next request; a request that had just been given it is handed
        another (httpcore's `ConnectionNotAvailable`)."""
        # httpx keeps its httpcore pool in `_pool`; from there on the API is httpcore's
        # public one (`connections`, `is_idle`, `aclose`). Proxied clients (no
        # transport of ours) are left alone.
        pool = getattr(self.transport, "_pool", None)
        if pool is None:
            return 0
        # httpcore gives a request the first available connection in its list, so the
        # last idle ones are those used least.
        surplus = [c for c in pool.connections if c.is_idle()][max(keep, 1) :]
        for connection in surplus:
            with trio.move_on_after(TRIM_CLOSE_S):
                await connection.aclose()
        return len(surplus)

    async def aclose(self) -> None:
        await self.client.aclose()


_HEADER_SAFE = re.compile(r"[\x21-\x7e]{1,255}")


def idempotency_key(operation_id: str) -> str:
    """The operation id as an idempotency key, the same for every attempt: as it is when a
    header can carry it (printable ASCII), else a digest of it (a request id may be any
    UTF-8 string, and a line break in a header would be a second header)."""
    if _HEADER_SAFE.fullmatch(operation_id):
        return operation_id
    return "tl-" + hashlib.sha256(operation_id.encode()).hexdigest()[:40]


def _proxied(base_url: str) -> bool:
    """Whether the environment sends requests to `base_url` through a proxy (as httpx,
    which honours HTTP(S)_PROXY, ALL_PROXY and NO_PROXY, would)."""
    if not base_url:
        return False
    proxies = urllib.request.getproxies_environment()
    url = httpx.URL(base_url)
    if not (proxies.get(url.scheme) or proxies.get("all")):
        return False
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # in CPython, not in typeshed
    return not bypass(url.host, proxies)
