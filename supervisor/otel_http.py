"""OTLP over HTTP for spans: posting a batch, and retrying it as the OTLP exporters do.

The spans come from the SDK's batch processor, on its thread; the body is built by
`otel_proto` (protobuf) or `otel_json` (JSON), both faster than the SDK's encoder.
A collector that is restarting or shedding load answers 429, 502, 503 or 504, or
drops the connection: the batch is sent again after an exponential backoff with
jitter (1 s, 2 s, 4 s... each ±20%), or after the collector's `Retry-After`, as
long as the wait fits in the export timeout. Any other answer drops the batch at
once. A dropped batch is one warning in the daemon's log, through our logger and
with the collector's URL stripped of credentials; a successful export is a debug
line. httpx's own line per request (INFO, with the whole URL, credentials and
all) is dropped for the exporter's requests.
"""

from __future__ import annotations

import gzip
import logging
import math
import os
import random
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from email.utils import parsedate_to_datetime

import httpx
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ..protocol import __version__
from . import otel_json, otel_proto

log = logging.getLogger("trunkline.telemetry")
_posting = threading.local()


class _OwnRequestsUnlogged(logging.Filter):
    """Drops httpx's records made while this thread posts an export."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_posting, "on", False)


logging.getLogger("httpx").addFilter(_OwnRequestsUnlogged())

#: What OTLP/HTTP calls a transient failure (the specification's list, as the SDK's).
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
#: Sends of one batch at most (the SDK's exporters make as many).
MAX_SENDS = 6
JITTER = 0.2
#: The body's encoder and content type, by OTLP protocol.
ENCODINGS: dict[str, tuple[Callable[[Sequence[ReadableSpan]], bytes], str]] = {
    "http/protobuf": (otel_proto.traces_body, "application/x-protobuf"),
    "http/json": (otel_json.traces_body, "application/json"),
}


class OtlpSpanExporter(SpanExporter):
    """Posts each batch the SDK's processor hands over, retrying transient failures
    within `timeout_s` in all. `clock`, `wait` and `jitter` are the test's to replace
    (`wait(seconds)` returns True when the exporter was shut down meanwhile)."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        timeout_s: float,
        *,
        protocol: str = "http/protobuf",
        compression: str = "none",
        tls: ssl.SSLContext | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        wait: Callable[[float], bool] | None = None,
        jitter: Callable[[], float] = lambda: random.uniform(1 - JITTER, 1 + JITTER),
    ) -> None:
        self.url = url
        self.encode, content_type = ENCODINGS[protocol]
        self.gzip = compression == "gzip"
        sent = {"user-agent": f"trunkline/{__version__}", **headers, "content-type": content_type}
        if self.gzip:
            sent["content-encoding"] = "gzip"
        self.http = httpx.Client(headers=sent, transport=transport, verify=tls or True)
        self.timeout_s = timeout_s
        self.clock = clock
        self.stopping = threading.Event()
        self.wait = wait or self.stopping.wait
        self.jitter = jitter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.stopping.is_set():
            return SpanExportResult.FAILURE
        body = self.encode(spans)
        if self.gzip:
            body = gzip.compress(body, compresslevel=6, mtime=0)
        return self.send(body, len(spans))

    def send(self, body: bytes, count: int) -> SpanExportResult:
        deadline = self.clock() + self.timeout_s
        for sent in range(1, MAX_SENDS + 1):
            retry_after: float | None = None
            _posting.on = True
            try:
                reply = self.http.post(self.url, content=body, timeout=max(deadline - self.clock(), 0.001))
            except httpx.TransportError as exc:  # refused, reset, timed out: the collector may be restarting
                failure, retryable = f"could not be reached ({type(exc).__name__})", True
            else:
                if reply.status_code < 300:
                    log.debug("telemetry: %d spans sent to %s", count, shown(self.url))
                    return SpanExportResult.SUCCESS
                failure = f"answered {reply.status_code}"
                retryable = reply.status_code in RETRYABLE_STATUSES
                retry_after = retry_after_s(reply.headers.get("retry-after"), self.clock())
            finally:
                _posting.on = False
            if not retryable:
                log.warning("telemetry: %d spans dropped: the collector at %s %s", count, shown(self.url), failure)
                return SpanExportResult.FAILURE
            pause = retry_after if retry_after is not None else 2 ** (sent - 1) * self.jitter()
            if sent == MAX_SENDS or pause > deadline - self.clock():
                log.warning(
                    "telemetry: %d spans dropped: the collector at %s %s %d time%s within %.0f s",
                    count,
                    shown(self.url),
                    failure,
                    sent,
                    "" if sent == 1 else "s",
                    self.timeout_s,
                )
                return SpanExportResult.FAILURE
            if self.wait(pause):
                log.warning(
                    "telemetry: %d spans dropped at shutdown: the collector at %s %s", count, shown(self.url), failure
                )
                return SpanExportResult.FAILURE
        raise AssertionError("unreachable: the last send returns")

    def shutdown(self) -> None:
        self.stopping.set()  # a batch waiting to be sent again gives up
        self.http.close()


def retry_after_s(value: str | None, now: float) -> float | None:
    """A `Retry-After` header in seconds from now: a number of seconds or an HTTP date."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            return max(parsedate_to_datetime(value).timestamp() - now, 0.0)
        except (TypeError, ValueError):
            return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def shown(url: str) -> str:
    """A URL for a log line: without the user, password or query it may carry."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


# -- the OTEL_EXPORTER_OTLP_* variables, as the SDK's exporters read them for spans --------


def traces_variable(name: str) -> str | None:
    """OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name>."""
    return os.environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or os.environ.get(f"OTEL_EXPORTER_OTLP_{name}")


def env_traces_url() -> str:
    """Where spans go when the config names no collector (a signal's own variable is the whole URL)."""
    whole = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if whole:
        return whole
    return f"{os.environ.get('OTEL_EXPORTER_OTLP_ENDPOINT', 'http://localhost:4318').rstrip('/')}/v1/traces"


def env_headers() -> dict[str, str]:
    """`k=v,k2=v2`, URL-encoded."""
    out: dict[str, str] = {}
    for item in (traces_variable("HEADERS") or "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[urllib.parse.unquote(key.strip()).lower()] = urllib.parse.unquote(value.strip())
    return out


def env_tls() -> ssl.SSLContext | None:
    """The collector's CA and our client certificate (mTLS), when the variables name them."""
    ca, cert, key = traces_variable("CERTIFICATE"), traces_variable("CLIENT_CERTIFICATE"), traces_variable("CLIENT_KEY")
    if not (ca or cert):
        return None
    context = ssl.create_default_context(cafile=ca)
    if cert:
        context.load_cert_chain(cert, key)
    return context
