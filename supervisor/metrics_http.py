"""The HTTP side of the Prometheus endpoint: `GET /metrics`, and nothing else.

`/metrics` answers GET and HEAD (405 otherwise), `/` a one-line pointer to it,
every other path 404. With a bearer token configured, every request must bring
`Authorization: Bearer <token>` (401 with `WWW-Authenticate: Bearer` otherwise);
the token is compared in constant time and never logged. The server runs on
threads of its own, so a scrape never holds up the daemon's event loop; a bounded
number of connections, each with a timeout, keeps a slow or hostile client from
piling up threads.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import logging
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger("trunkline.supervisor")

#: Connections served at once; more are closed at once (Prometheus needs one or two).
MAX_CONNECTIONS = 16
#: Seconds a connection may stay silent while its request is read or its answer sent.
SOCKET_TIMEOUT_S = 10.0

_POINTER = b"trunkline: the metrics are at /metrics\n"
_TEXT = ("Content-Type", "text/plain; charset=utf-8")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class MetricsApp:
    """The WSGI application: paths, methods, the token, then the exposition."""

    def __init__(self, registry: CollectorRegistry, token: str | None) -> None:
        self.registry = registry
        # Compared as digests: equal lengths, so the comparison's time tells nothing.
        self._token = _digest(token) if token is not None else None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        status, body, headers = self._answer(environ)
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]

    def _answer(self, environ: dict[str, Any]) -> tuple[str, bytes, list[tuple[str, str]]]:
        method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
        if self._token is not None and not self._authorized(environ.get("HTTP_AUTHORIZATION", "")):
            return (
                "401 Unauthorized",
                b"a bearer token is required\n",
                [_TEXT, ("WWW-Authenticate", 'Bearer realm="trunkline metrics"')],
            )
        if path not in ("/metrics", "/"):
            return "404 Not Found", b"not found: the metrics are at /metrics\n", [_TEXT]
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", b"only GET and HEAD\n", [_TEXT, ("Allow", "GET, HEAD")]
        if path == "/":
            return "200 OK", _POINTER, [_TEXT]
        try:
            body, headers = self._exposition(environ)
        except Exception:
            log.exception("metrics: the scrape failed")
            return "500 Internal Server Error", b"the metrics could not be read\n", [_TEXT]
        return "200 OK", body, headers

    def _authorized(self, header: str) -> bool:
        scheme, _, credentials = header.strip().partition(" ")
        assert self._token is not None
        return hmac.compare_digest(_digest(credentials.strip()), self._token) and scheme.lower() == "bearer"

    def _exposition(self, environ: dict[str, Any]) -> tuple[bytes, list[tuple[str, str]]]:
        encode, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        body = encode(self.registry)
        headers = [("Content-Type", content_type)]
        accepted = (part.split(";")[0].strip() for part in environ.get("HTTP_ACCEPT_ENCODING", "").split(","))
        if "gzip" in accepted:
            body = gzip.compress(body, compresslevel=6)
            headers.append(("Content-Encoding", "gzip"))
        return body, headers


class _Handler(WSGIRequestHandler):
    timeout = SOCKET_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no access log: a scrape every few seconds would fill it


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64  # the listen backlog (5 by default)

    def __init__(self, address: tuple[str, int], family: int) -> None:
        self.address_family = family
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Called by socketserver from its own except block: the exception is current.
        log.debug("metrics: a connection failed", exc_info=sys.exc_info())  # a client that went away, a timeout


class MetricsServer:
    """The endpoint, listening from `start()` until `close()`."""

    def __init__(self, host: str, port: int, app: MetricsApp) -> None:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        # An IPv4 or IPv6 address begins with the host and the port (the typing allows others).
        bound_host, bound_port = address[0], address[1]
        assert isinstance(bound_host, str)
        assert isinstance(bound_port, int)
        self._server = _Server((bound_host, bound_port), family)
        self._server.set_app(app)
        self.port = self._server.server_address[1]
        # Polled this often for `close()`, which waits for the loop to notice.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,), name="tl-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
