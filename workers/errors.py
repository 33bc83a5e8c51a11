"""One error type for every provider failure, and the shared mappings into it.

    ProviderError            .error_class .retryable .status .code .retry_after
      raised by a provider's `errors.classify` (HTTP status first, body refines),
      by `from_transport` (every httpx transport error), by stream translators
      (an error event mid-stream, a malformed body) and by the runtime (deadlines).

Every message passes through `redact` before it leaves the worker, so an API
key a provider echoes back never reaches a log, an event or an error.
"""

from __future__ import annotations

import contextlib
import email.utils
import re
import time
from collections.abc import Iterable, Mapping

import httpx

from ..protocol.messages import RETRYABLE, ContentPart, ErrorClass, ErrorInfo


class ProviderError(Exception):
    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
        sent: bool = False,
    ) -> None:
        super().__init__(message)
        self.error_class: ErrorClass = error_class
        self.message = message
        self.status = status
        self.code = code
        self.retry_after = retry_after
        self.retryable = RETRYABLE[error_class] if retryable is None else retryable
        #: The provider had the whole request and may have acted on it (and billed it).
        self.sent = sent
        #: Why this attempt must not be repeated now, though its class is retryable
        #: (empty: say nothing more than the error itself).
        self.hold: str | None = None
        #: What a whole-response request had gathered when it failed (content parts).
        self.gathered: list[ContentPart] | None = None
        #: The attempt had received output (text, reasoning, a tool call), which the
        #: provider bills: it is never sent again.
        self.output = False

    def to_info(self, provider: str | None = None, secrets: Iterable[str] = ()) -> ErrorInfo:
        return ErrorInfo(
            error_class=self.error_class,
            message=redact(self.message, secrets),
            retryable=self.retryable,
            retry_after_s=self.retry_after,
            provider=provider,
            provider_status=self.status,
            provider_code=self.code,
        )

    def __repr__(self) -> str:
        return f"ProviderError({self.error_class!r}, {self.message!r}, status={self.status})"


# Generic meaning of an HTTP status, before a provider's body refines it.
STATUS_CLASS: dict[int, ErrorClass] = {
    400: "invalid_request",
    401: "authentication",
    402: "quota_exceeded",
    403: "access_denied",
    404: "not_found",
    408: "timeout",
    409: "invalid_request",
    413: "context_length",
    422: "invalid_request",
    429: "rate_limit",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    # A gateway in front of the provider gave up waiting: the provider's side failed,
    # and the same request may well succeed again (a `timeout` is our own deadline).
    504: "server_error",
    529: "rate_limit",
}


def status_class(status: int) -> ErrorClass:
    if status in STATUS_CLASS:
        return STATUS_CLASS[status]
    if 400 <= status < 500:
        return "invalid_request"
    if status >= 500:
        return "server_error"
    return "invalid_response"


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` in seconds or as an HTTP date."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(float(value) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


#: Transport failures that happen before the provider has the whole request body.
NOT_SENT: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.WriteError,
    httpx.WriteTimeout,
    httpx.ProxyError,
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
)

# Each httpx transport error, by what it means to a caller.
HTTPX_EXC_MAP: dict[type[httpx.TransportError], ErrorClass] = {
    httpx.ConnectTimeout: "timeout",
    httpx.ReadTimeout: "timeout",
    httpx.WriteTimeout: "timeout",
    httpx.PoolTimeout: "timeout",
    httpx.TimeoutException: "timeout",
    httpx.ConnectError: "network",
    httpx.ReadError: "network",
    httpx.WriteError: "network",
    httpx.CloseError: "network",
    httpx.NetworkError: "network",
    httpx.RemoteProtocolError: "network",
    httpx.LocalProtocolError: "other",
    httpx.ProtocolError: "network",
    httpx.ProxyError: "network",
    httpx.UnsupportedProtocol: "not_configured",
    httpx.TransportError: "network",
}


def from_transport(exc: httpx.TransportError, what: str = "the provider", url: str = "") -> ProviderError:
    """A transport failure as a ProviderError; the most specific mapping wins. `url`:
    where the request went, when the exception does not say."""
    error_class: ErrorClass = next(
        (
            HTTPX_EXC_MAP[cls]
            for cls in type(exc).__mro__
            if issubclass(cls, httpx.TransportError) and cls in HTTPX_EXC_MAP
        ),
        "network",  # not reached: TransportError itself is in the map
    )
    with contextlib.suppress(RuntimeError):
        url = str(exc.request.url.copy_with(query=None))
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        message = f"cannot connect to {what} at {url or 'its base URL'}: {detail}"
    elif error_class == "timeout":
        message = f"{type(exc).__name__} talking to {what}{' at ' + url if url else ''}"
    else:
        message = f"{type(exc).__name__} talking to {what}: {detail}"
    return ProviderError(error_class, message, sent=not isinstance(exc, NOT_SENT))


_KEY_PATTERNS = re.compile(
    r"(sk-ant-[A-Za-z0-9_\-]{8,}|sk-[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{20,}|Bearer\s+[A-Za-z0-9._\-]{12,})"
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every known secret, and anything shaped like an API key, replaced."""
    for secret in secrets:
        if secret and len(secret) >= 6:
            text = text.replace(secret, "[redacted]")
    return _KEY_PATTERNS.sub("[redacted]", text)


def invalid_response(message: str) -> ProviderError:
    return ProviderError("invalid_response", message)
