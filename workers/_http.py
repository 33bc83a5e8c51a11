"""The HTTP half of the runtime: one pooled httpx client per worker, and the two
ways of calling a provider (a JSON reply, or a stream of chunks).

Every provider that speaks HTTP subclasses `HttpAdapter` and supplies its pure
parts; this module turns status codes, transport failures, silence and
cancellation into the same `ProviderError`s and guarantees that a cancelled or
failed stream closes its connection at once.
"""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
import trio

from ..protocol import __version__
from ..protocol.messages import RateLimit
from ._adapter import Adapter, Call, consume
from .errors import ProviderError, from_transport, invalid_response

USER_AGENT = f"trunkline/{__version__}"
#: Idle connections kept open per worker. httpcore checks every pooled connection (a
#: readability poll for each idle one) on every request and every release, so the pool
#: cost grows with its idle connections. Measured at 64 requests in flight: 8.3 ms of
#: the worker's CPU per request with 1,200 allowed to idle, 2.4 ms with 16 (and three
#: times the requests/s). Busy connections are never limited by this.
KEEPALIVE_MAX = 16


class HttpAdapter(Adapter):
    """Base of the adapters that call an HTTP API."""

    default_base_url = ""
    #: Header carrying the operation id, stable across retries (None: the provider has none).
    idempotency_header: str | None = "Idempotency-Key"

    def __init__(self, *args: Any, transport: httpx.AsyncBaseTransport | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base_url = (self.config.resolved_base_url() or self.default_base_url).rstrip("/")
        t = self.timeouts
        limits = httpx.Limits(max_connections=self.config.max_connections,
                              max_keepalive_connections=min(self.config.max_connections, KEEPALIVE_MAX),
                              keepalive_expiry=60.0)
        # Reads are bounded by the stream idle timeout; the whole request by the runtime's deadline.
        timeout = httpx.Timeout(connect=t.connect_s, read=t.stream_idle_s, write=t.connect_s, pool=t.connect_s)
        # Provider calls go straight to the connection pool (the client shares it): the
        # client's per-request work (URL merging, cookie jar, auth and redirect
        # wrappers) cost about a quarter of the CPU of a small call, and an LLM API
        # needs none of it. Through an environment proxy they take the client's path
        # (httpx applies environment proxies only to a client that builds its own pool).
        self._direct = transport is not None or not _proxied(self.base_url)
        self.transport = (transport or httpx.AsyncHTTPTransport(limits=limits)) if self._direct else None
        self.client = httpx.AsyncClient(transport=self.transport, limits=limits, timeout=timeout,
                                        headers={"user-agent": USER_AGENT, **self.config.headers},
                                        follow_redirects=False)
        self._base_headers = {"user-agent": USER_AGENT, "accept": "*/*", "accept-encoding": "gzip, deflate",
                              **{k.lower(): v for k, v in self.config.headers.items()}}
        self._timeout = timeout.as_dict()
        self._urls: dict[str, httpx.URL] = {}

    # -- what a provider supplies ----------------------------------------------------

    def auth_headers(self) -> dict[str, str]:
        """Credentials for every request (never logged)."""
        return {}

    def classify(self, status: int, headers: httpx.Headers, body: bytes) -> ProviderError:
        """An error response as a ProviderError (each provider's `errors.classify`)."""
        raise NotImplementedError

    def rate_limit(self, headers: httpx.Headers) -> RateLimit | None:
        return None

    # -- calling -----------------------------------------------------------------------

    def headers_for(self, call: Call, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"content-type": "application/json", **self.auth_headers()}
        if self.idempotency_header:
            headers[self.idempotency_header] = call.operation_id
        if extra:
            headers.update(extra)
        return headers

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    @asynccontextmanager
    async def _send(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> AsyncIterator[httpx.Response]:
        """POST `body`; the response's body is read by the caller, and closed on the way out."""
        content = msgspec.json.encode(body)
        if not self._direct:
            async with self.client.stream("POST", self.url(path), content=content, headers=headers) as response:
                yield response
            return
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self.url(path))
        request = httpx.Request("POST", url, headers={**self._base_headers, **headers}, content=content,
                                extensions={"timeout": self._timeout})
        assert self.transport is not None
        response = await self.transport.handle_async_request(request)
        response.request = request
        try:
            yield response
        finally:
            await response.aclose()

    async def post_json(self, call: Call, path: str, body: dict[str, Any],
                        headers: dict[str, str] | None = None) -> tuple[Any, httpx.Headers]:
        """POST and return the decoded JSON reply, or raise the classified error."""
        try:
            call.upstream_open = True
            async with self._send(path, body, self.headers_for(call, headers)) as response:
                content = await response.aread()
        except httpx.TransportError as exc:
            raise from_transport(exc, self.name) from None
        except httpx.DecodingError as exc:
            raise invalid_response(f"{self.name} sent a body that could not be decoded: {exc}") from None
        finally:
            call.upstream_open = False
        call.rate_limit = self.rate_limit(response.headers)
        if response.status_code >= 400:
            raise self.classify(response.status_code, response.headers, content)
        try:
            return msgspec.json.decode(content), response.headers
        except msgspec.DecodeError as exc:
            raise invalid_response(f"{self.name} sent a body that is not JSON ({exc}): "
                                   f"{content[:200]!r}") from None

    async def get_json(self, path: str, headers: dict[str, str] | None = None) -> Any:
        try:
            response = await self.client.get(self.url(path), headers={**self.auth_headers(), **(headers or {})})
        except httpx.TransportError as exc:
            raise from_transport(exc, self.name) from None
        if response.status_code >= 400:
            raise self.classify(response.status_code, response.headers, response.content)
        try:
            return msgspec.json.decode(response.content)
        except msgspec.DecodeError:
            raise invalid_response(f"{self.name} sent a body that is not JSON: {response.content[:200]!r}") from None

    async def post_stream(self, call: Call, path: str, body: dict[str, Any], feed: Callable[[bytes], None],
                          headers: dict[str, str] | None = None) -> httpx.Headers:
        """POST and hand each chunk of the streamed reply to `feed` as it arrives.

        Silence longer than the stream idle timeout is a `timeout`; a cancel or an
        error leaves the `async with` and so closes the connection at once."""
        idle = call.deadlines.stream_idle_s
        try:
            async with self._send(path, body, self.headers_for(call, headers)) as response:
                call.upstream_open = True
                call.rate_limit = self.rate_limit(response.headers)
                if response.status_code >= 400:
                    raise self.classify(response.status_code, response.headers, await response.aread())
                await consume(response.aiter_bytes(), idle, self.name, feed)
                return response.headers
        except httpx.TransportError as exc:
            raise from_transport(exc, self.name) from None
        except httpx.DecodingError as exc:
            raise invalid_response(f"{self.name} sent a body that could not be decoded: {exc}") from None
        finally:
            call.upstream_open = False

    def is_local(self) -> bool:
        host = httpx.URL(self.base_url).host if self.base_url else ""
        return host in ("localhost", "127.0.0.1", "::1") or host.startswith(("10.", "192.168.", "172."))

    async def probe_path(self, path: str) -> str | None:
        try:
            response = await self.client.get(self.url(path), headers=self.auth_headers(), timeout=2.0)
        except httpx.TransportError as exc:
            return from_transport(exc, self.name).message
        return None if response.status_code < 500 else f"{self.name} answered HTTP {response.status_code}"

    async def aclose(self) -> None:
        await self.client.aclose()


def _proxied(base_url: str) -> bool:
    """Whether the environment sends requests to `base_url` through a proxy (as httpx,
    which honours HTTP(S)_PROXY, ALL_PROXY and NO_PROXY, would)."""
    if not base_url:
        return False
    proxies = urllib.request.getproxies_environment()
    url = httpx.URL(base_url)
    if not (proxies.get(url.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(url.host, proxies)
