"""Exceptions a client raises: one per error class, all `TrunklineError`.

TrunklineError          .error_class .retryable .retry_after .provider .status .code .partial
  AuthenticationError, AccessDeniedError, NotFoundError, InvalidRequestError,
  ContextLengthError, ContentFilterError, QuotaExceededError, RateLimitError,
  ServerError, ProviderTimeoutError, NetworkError, ModelNotLoadedError,
  InvalidResponseError (NoObjectGeneratedError), RequestCancelledError, NotConfiguredError,
  UnavailableError, OtherError            -- each named for its `error_class`
DaemonNotRunning        no daemon listens where the client looked
DaemonUnavailable       the daemon stopped answering
TLSError                a tls+tcp:// endpoint that cannot be trusted or reached over TLS
"""

from __future__ import annotations

from .protocol.messages import ErrorInfo, Response


class TrunklineError(Exception):
    error_class = "other"

    def __init__(self, info: ErrorInfo, partial: Response | None = None, request_id: str | None = None) -> None:
        super().__init__(f"{info.error_class}: {info.message}")
        self.info = info
        self.message = info.message
        self.retryable = info.retryable
        self.retry_after = info.retry_after_s
        self.provider = info.provider
        self.status = info.provider_status
        self.code = info.provider_code
        self.partial = partial
        self.request_id = request_id


class AuthenticationError(TrunklineError):
    error_class = "authentication"


class AccessDeniedError(TrunklineError):
    error_class = "access_denied"


class NotFoundError(TrunklineError):
    error_class = "not_found"


class InvalidRequestError(TrunklineError):
    error_class = "invalid_request"


class ContextLengthError(TrunklineError):
    error_class = "context_length"


class ContentFilterError(TrunklineError):
    error_class = "content_filter"


class QuotaExceededError(TrunklineError):
    error_class = "quota_exceeded"


class RateLimitError(TrunklineError):
    error_class = "rate_limit"


class ServerError(TrunklineError):
    error_class = "server_error"


class ProviderTimeoutError(TrunklineError):
    error_class = "timeout"


class NetworkError(TrunklineError):
    error_class = "network"


class ModelNotLoadedError(TrunklineError):
    error_class = "model_not_loaded"


class InvalidResponseError(TrunklineError):
    error_class = "invalid_response"


class NoObjectGeneratedError(InvalidResponseError):
    """`generate_object` got an answer that is not JSON or does not fit the schema:
    `text` is the answer, `validation_error` says what is wrong with it."""

    def __init__(
        self,
        info: ErrorInfo,
        partial: Response | None = None,
        request_id: str | None = None,
        *,
        text: str = "",
        validation_error: str = "",
        response: Response | None = None,
    ) -> None:
        super().__init__(info, partial, request_id)
        self.text = text
        self.validation_error = validation_error
        self.response = response


class RequestCancelledError(TrunklineError):
    error_class = "cancelled"


class NotConfiguredError(TrunklineError):
    error_class = "not_configured"


class UnavailableError(TrunklineError):
    error_class = "unavailable"


class OtherError(TrunklineError):
    error_class = "other"


ERRORS: dict[str, type[TrunklineError]] = {
    cls.error_class: cls
    for cls in (
        AuthenticationError,
        AccessDeniedError,
        NotFoundError,
        InvalidRequestError,
        ContextLengthError,
        ContentFilterError,
        QuotaExceededError,
        RateLimitError,
        ServerError,
        ProviderTimeoutError,
        NetworkError,
        ModelNotLoadedError,
        InvalidResponseError,
        RequestCancelledError,
        NotConfiguredError,
        UnavailableError,
        OtherError,
    )
}


def error_from_info(info: ErrorInfo, partial: Response | None = None, request_id: str | None = None) -> TrunklineError:
    return ERRORS.get(info.error_class, OtherError)(info, partial, request_id)


class DaemonNotRunning(ConnectionError):
    """No trunkline daemon is listening at the endpoint the client tried."""


class DaemonUnavailable(ConnectionError):
    """The daemon did not answer in time (it stopped, or it is overloaded)."""


class TLSError(ConnectionError):
    """A `tls+tcp://` endpoint could not be used: no CA given, a CA or certificate file
    that cannot be read, or a handshake that failed (a certificate not signed by the
    CA, issued for another name, or an endpoint that does not speak TLS). Something
    answers there: unlike `DaemonNotRunning`, starting a daemon would not help."""
