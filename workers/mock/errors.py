"""A scripted error chunk -> ProviderError, as a real provider's errors module maps a response."""

from __future__ import annotations

from typing import Any, get_args

from ...protocol.messages import ErrorClass
from ..errors import ProviderError

_CLASSES = set(get_args(ErrorClass))


def classify(chunk: dict[str, Any]) -> ProviderError:
    error_class = chunk.get("error_class", "server_error")
    if error_class not in _CLASSES:
        return ProviderError("invalid_request", f"provider_options.mock: unknown error_class {error_class!r}")
    return ProviderError(
        error_class,
        chunk.get("message", "mock failure"),
        status=chunk.get("status"),
        code=chunk.get("code"),
        retry_after=chunk.get("retry_after"),
    )


def applies(chunk: dict[str, Any], attempt: int) -> bool:
    """Whether a scripted error fires on this attempt (`attempts`: only the first N)."""
    limit = chunk.get("attempts")
    return limit is None or attempt <= limit
