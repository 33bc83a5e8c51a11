"""OpenAI Responses errors -> ProviderError. Status first, then `type`, with `code` as a hint.

An HTTP error body is {"error": {"message", "type", "param", "code"}}, where
`code` may be null. Inside a 200 stream the `error` event carries the same
fields at its top level, and `response.failed` an `error: {code, message}`.
A bad model name is 400 `model_not_found` here (404 on Chat Completions).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ...protocol.messages import ErrorClass
from ..errors import ProviderError, parse_retry_after, status_class

_TYPES: dict[str, ErrorClass] = {
    "authentication_error": "authentication",
    "permission_error": "access_denied",
    "insufficient_quota": "quota_exceeded",
    "rate_limit_error": "rate_limit",
    "not_found_error": "not_found",
    "server_error": "server_error",
}
_CODES: dict[str, ErrorClass] = {
    "model_not_found": "not_found",
    "insufficient_quota": "quota_exceeded",
    "billing_hard_limit_reached": "quota_exceeded",
    "context_length_exceeded": "context_length",
    "string_above_max_length": "context_length",
    "rate_limit_exceeded": "rate_limit",
    "invalid_api_key": "authentication",
    "server_error": "server_error",
    "server_is_overloaded": "server_error",
    "vector_store_timeout": "timeout",
    "content_filter": "content_filter",
    "invalid_prompt": "content_filter",
}


def from_error_object(
    error: Mapping[str, Any], status: int | None = None, retry_after: float | None = None
) -> ProviderError:
    """Classify an error object (HTTP body, stream `error` event or `response.error`)."""
    message = str(error.get("message") or "")
    kind = error.get("type")
    kind = str(kind) if kind is not None and kind != "error" else None
    code = error.get("code")
    code = str(code) if code is not None else None
    param = error.get("param")
    error_class: ErrorClass = status_class(status) if status is not None else "server_error"
    if kind in _TYPES:
        error_class = _TYPES[kind]
    elif kind == "invalid_request_error" and status is None:
        error_class = "invalid_request"
    if code in _CODES:
        error_class = _CODES[code]
    if error_class == "invalid_request" and "context window" in message.lower():
        error_class = "context_length"
    label = message or (f"HTTP {status}" if status else "the response failed")
    if param:
        label = f"{label} (param: {param})"
    if code:
        label = f"{code}: {label}"
    return ProviderError(error_class, label, status=status, code=code or kind, retry_after=retry_after)


def classify(status: int, headers: Mapping[str, str], raw: bytes) -> ProviderError:
    try:
        body: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str):
        error = {"message": error}
    if not isinstance(error, dict):
        error = {"message": raw.decode("utf-8", "replace").strip()[:500]}
    return from_error_object(error, status, parse_retry_after(headers))
