"""OpenAI-compatible error responses -> ProviderError.

The OpenAI shape is {"error": {"message", "type", "param", "code"}}; servers
vary: OpenRouter puts an integer in `code` and the upstream text in
`error.metadata.raw`; vLLM answers {"object": "error", "message", "type",
"code"}; some send {"error": "text"} or {"detail": "text"}. Status first, then
`code` and `type` refine; a model still loading is `model_not_loaded`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ...protocol.messages import ErrorClass
from ..errors import ProviderError, parse_retry_after, status_class

_CODES: dict[str, ErrorClass] = {
    "context_length_exceeded": "context_length",
    "string_above_max_length": "context_length",
    "rate_limit_exceeded": "rate_limit",
    "insufficient_quota": "quota_exceeded",
    "invalid_api_key": "authentication",
    "model_not_found": "not_found",
    "content_filter": "content_filter",
    "content_policy_violation": "content_filter",
    "model_not_loaded": "model_not_loaded",
}
_TYPES: dict[str, ErrorClass] = {
    "authentication_error": "authentication",
    "permission_error": "access_denied",
    "insufficient_quota": "quota_exceeded",
    "server_error": "server_error",
    "rate_limit_error": "rate_limit",
    "not_found_error": "not_found",
}
_LOADING = ("loading model", "model is loading", "not loaded", "currently loading", "model_not_loaded")


def _fields(body: Any) -> tuple[str, str | None, str | None]:
    """(message, code, type) from whichever shape the server used."""
    if not isinstance(body, dict):
        return str(body)[:500], None, None
    error = body.get("error", body)
    if isinstance(error, str):
        return error, None, None
    if not isinstance(error, dict):
        return str(body.get("detail") or body)[:500], None, None
    message = str(error.get("message") or body.get("detail") or "")
    metadata = error.get("metadata")
    if isinstance(metadata, dict) and metadata.get("raw"):
        message = f"{message}: {metadata['raw']}"
    code = error.get("code")
    kind = error.get("type")
    return message, str(code) if code is not None else None, str(kind) if kind is not None else None


def from_body(status: int | None, body: Any, retry_after: float | None = None) -> ProviderError:
    message, code, kind = _fields(body)
    error_class: ErrorClass = status_class(status) if status is not None else "server_error"
    if kind in _TYPES:
        error_class = _TYPES[kind]
    if code in _CODES:
        error_class = _CODES[code]
    lowered = message.lower()
    if error_class in ("invalid_request", "not_found") and (
        "context length" in lowered or "maximum context" in lowered or "context_length" in lowered
    ):
        error_class = "context_length"
    if status == 503 and any(w in lowered for w in _LOADING):
        error_class = "model_not_loaded"
    label = f"{code}: {message}" if code and not code.isdigit() else message
    return ProviderError(
        error_class, label or f"HTTP {status}", status=status, code=code or kind, retry_after=retry_after
    )


def classify(status: int, headers: Mapping[str, str], raw: bytes) -> ProviderError:
    try:
        body: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        body = raw.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
    return from_body(status, body, parse_retry_after(headers))


#: How servers say a field is not one they take (OpenAI's `unsupported_parameter`, a
#: pydantic-validated server's "Extra inputs are not permitted", llama.cpp, vLLM...).
_REFUSED_FIELD = (
    "unsupported",
    "not supported",
    "unknown",
    "unrecognized",
    "unrecognised",
    "extra",
    "not permitted",
    "not allowed",
    "unexpected",
)


def refuses_field(err: ProviderError, name: str) -> bool:
    """Whether `err` is a refusal of the request because it carried the field `name`
    (a 400 or 422 naming it as a field the server does not take, not as a bad value)."""
    if err.status not in (400, 422) or name not in err.message:
        return False
    lowered = err.message.lower()
    if "unsupported value" in lowered or err.code in ("unsupported_value", "invalid_value"):
        return False  # OpenAI's words for a value the field does not take
    return any(words in lowered for words in _REFUSED_FIELD)
