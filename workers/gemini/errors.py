"""Gemini error responses -> ProviderError, by the body's `status` (a google.rpc code name).

Body shape: {"error": {"code": 429, "message": "...", "status": "RESOURCE_EXHAUSTED",
"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "34s"}, ...]}},
sometimes wrapped in a one-element array (the JSON-array stream form).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from ...protocol.messages import ErrorClass
from ..errors import ProviderError, parse_retry_after, status_class

_STATUS: dict[str, ErrorClass] = {
    "INVALID_ARGUMENT": "invalid_request",
    "FAILED_PRECONDITION": "invalid_request",
    "OUT_OF_RANGE": "invalid_request",
    "UNAUTHENTICATED": "authentication",
    "PERMISSION_DENIED": "access_denied",
    "NOT_FOUND": "not_found",
    "RESOURCE_EXHAUSTED": "rate_limit",
    "UNAVAILABLE": "server_error",
    "INTERNAL": "server_error",
    "UNKNOWN": "server_error",
    "DEADLINE_EXCEEDED": "server_error",  # Google's 504: its backend gave up, not our deadline
    "ABORTED": "server_error",
}

#: google.rpc.ErrorInfo reasons that say more than the status does.
_REASONS: dict[str, ErrorClass] = {
    "API_KEY_INVALID": "authentication",
    "API_KEY_EXPIRED": "authentication",
}

_CONTEXT_WORDS = (
    "exceeds the maximum number of tokens",
    "input token count",
    "too many tokens",
    "context window",
    "context length",
)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def retry_delay(details: Any) -> float | None:
    """Seconds from a google.rpc.RetryInfo detail (`retryDelay` is a Duration: "34s", "0.5s")."""
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and (m := _DURATION.match(delay)):
                return float(m.group(1))
            if isinstance(delay, dict):  # the proto form, {"seconds": 3, "nanos": 5e8}
                return float(delay.get("seconds") or 0) + float(delay.get("nanos") or 0) / 1e9
    return None


def _reason(details: Any) -> str | None:
    if isinstance(details, list):
        for detail in details:
            if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.ErrorInfo"):
                return str(detail.get("reason") or "") or None
    return None


def from_error_object(
    error: Mapping[str, Any], status: int | None = None, retry_after: float | None = None
) -> ProviderError:
    """Classify an `error` object (from an HTTP error body or from inside a stream)."""
    code = error.get("code")
    http = status if status is not None else (code if isinstance(code, int) else None)
    name = str(error.get("status") or "") or None
    message = str(error.get("message") or "") or "(no message)"
    details = error.get("details")
    error_class: ErrorClass = status_class(http) if http is not None else "server_error"
    if name in _STATUS:
        error_class = _STATUS[name]
    reason = _reason(details)
    if reason in _REASONS:
        error_class = _REASONS[reason]
    if error_class == "invalid_request" and any(w in message.lower() for w in _CONTEXT_WORDS):
        error_class = "context_length"
    delay = retry_delay(details)
    label = f"{name}: {message}" if name else message
    return ProviderError(
        error_class, label, status=http, code=name or reason, retry_after=delay if delay is not None else retry_after
    )


def classify(status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
    try:
        data: Any = msgspec.json.decode(body)
    except msgspec.DecodeError:
        text = body.decode("utf-8", "replace").strip()[:500] or "(empty body)"
        return ProviderError(status_class(status), text, status=status, retry_after=parse_retry_after(headers))
    if isinstance(data, list) and data:
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return ProviderError(
            status_class(status),
            body.decode("utf-8", "replace")[:500],
            status=status,
            retry_after=parse_retry_after(headers),
        )
    return from_error_object(error, status, parse_retry_after(headers))
