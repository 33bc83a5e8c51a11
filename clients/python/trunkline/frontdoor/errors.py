"""Errors as each API says them: its status, its body, and how it streams one.

A daemon error (`ErrorInfo`, by class) maps to one HTTP status per API; what the
front door itself refuses (a body that is not JSON, a field it cannot translate, a
missing key) is an `ErrorInfo` too, class `invalid_request` or `authentication`.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ..protocol.messages import RETRYABLE, ErrorClass, ErrorInfo

Family = Literal["openai", "anthropic"]

#: HTTP status of each error class. `not_configured`: the model's provider has no key
#: here, which to a client is a model it cannot have.
STATUS: dict[str, int] = {
    "invalid_request": 400,
    "context_length": 400,
    "content_filter": 400,
    "authentication": 401,
    "access_denied": 403,
    "not_found": 404,
    "not_configured": 404,
    "quota_exceeded": 429,
    "rate_limit": 429,
    "cancelled": 499,
    "other": 500,
    "server_error": 500,
    "invalid_response": 502,
    "network": 502,
    "unavailable": 503,
    "model_not_loaded": 503,
    "timeout": 504,
}

#: Anthropic's error `type` for each status it documents.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}

#: OpenAI's error `type`, and the `code` a client may branch on.
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}
_OPENAI_CODES = {
    "context_length": "context_length_exceeded",
    "content_filter": "content_filter",
    "quota_exceeded": "insufficient_quota",
    "rate_limit": "rate_limit_exceeded",
    "not_found": "model_not_found",
    "not_configured": "model_not_found",
    "authentication": "invalid_api_key",
}


class HttpError(Exception):
    """A request the front door answers with an error before (or instead of) a call."""

    def __init__(self, info: ErrorInfo, status: int | None = None, param: str | None = None) -> None:
        super().__init__(info.message)
        self.info = info
        self.status = status
        self.param = param


def refuse(
    message: str, error_class: ErrorClass = "invalid_request", *, status: int | None = None, param: str | None = None
) -> HttpError:
    """The front door's own refusal, as an error to raise."""
    info = ErrorInfo(error_class=error_class, message=message, retryable=RETRYABLE[error_class])
    return HttpError(info, status, param)


def _overloaded(info: ErrorInfo) -> bool:
    """Anthropic's overloaded provider: a 529, or the `overloaded_error` a stream sends."""
    return info.error_class in ("rate_limit", "server_error") and (
        info.provider_status == 529 or info.provider_code == "overloaded_error"
    )


def status_of(info: ErrorInfo, family: Family) -> int:
    """The status a client of `family` expects: Anthropic's overloaded provider stays 529."""
    if family == "anthropic" and _overloaded(info):
        return 529
    if info.error_class == "rate_limit" and info.provider_status in (503, 529):
        return 503  # overloaded, not over a limit of the caller's
    return STATUS.get(info.error_class, 500)


def headers_of(info: ErrorInfo) -> list[tuple[bytes, bytes]]:
    if info.retry_after_s is not None:
        return [(b"retry-after", str(max(1, round(info.retry_after_s))).encode())]
    return []


def body_of(info: ErrorInfo, family: Family, status: int, param: str | None = None) -> dict[str, Any]:
    """The error body each API's SDKs read."""
    if family == "anthropic":
        kind = "overloaded_error" if _overloaded(info) else _ANTHROPIC_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": info.message}}
    kind = _OPENAI_TYPES.get(status, "server_error")
    return {
        "error": {
            "message": info.message,
            "type": kind,
            "param": param,
            "code": _OPENAI_CODES.get(info.error_class, info.provider_code),
        }
    }


def encode(body: Any) -> bytes:
    return msgspec.json.encode(body)
