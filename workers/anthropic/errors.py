"""Anthropic error responses -> ProviderError. Status first; the body's `error.type` refines.

Body shape: {"type": "error", "error": {"type": "...", "message": "..."}, "request_id": "req_..."}.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ...protocol.messages import ErrorClass
from ..errors import ProviderError, parse_retry_after, status_class

#: `error.type` values and what they mean, where the status alone may not say.
_TYPES: dict[str, ErrorClass] = {
    "authentication_error": "authentication",
    "permission_error": "access_denied",
    "not_found_error": "not_found",
    "rate_limit_error": "rate_limit",
    "overloaded_error": "rate_limit",
    "api_error": "server_error",
    "request_too_large": "context_length",
    "billing_error": "quota_exceeded",
    # Anthropic's documented 504: its side gave up processing the request. As every
    # upstream 504 it is a retried server_error; `timeout` is our own deadline only.
    "timeout_error": "server_error",
}

_CONTEXT_WORDS = (
    "prompt is too long",
    "context window",
    "context length",
    "too many tokens",
    "exceeds the maximum",
    "input length",
)


def _body(raw: bytes) -> tuple[str | None, str]:
    try:
        data: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None, raw.decode("utf-8", "replace").strip()[:500] or "(empty body)"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return error.get("type"), str(error.get("message") or "")
    return None, raw.decode("utf-8", "replace")[:500]


def from_error_object(
    error_type: str | None, message: str, status: int | None = None, retry_after: float | None = None
) -> ProviderError:
    """Classify an error body (also the `error` event of a stream, which has no status)."""
    if status is not None:
        error_class = status_class(status)
        if status == 529:
            error_class = "rate_limit"
    else:
        error_class = "server_error"
    if error_type in _TYPES:
        error_class = _TYPES[error_type]
    if error_type == "invalid_request_error" or (status == 400 and error_type is None):
        lowered = message.lower()
        error_class = "context_length" if any(w in lowered for w in _CONTEXT_WORDS) else "invalid_request"
    label = f"{error_type}: {message}" if error_type else message
    return ProviderError(error_class, label, status=status, code=error_type, retry_after=retry_after)


def classify(status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
    error_type, message = _body(body)
    return from_error_object(error_type, message, status, parse_retry_after(headers))
