"""Ollama error responses -> ProviderError. Ollama's bodies are flat: {"error": "text"}."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ...protocol.messages import ErrorClass
from ..errors import ProviderError, parse_retry_after, status_class


def classify(status: int, headers: Mapping[str, str], raw: bytes) -> ProviderError:
    try:
        body: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        body = None
    message = (
        str(body.get("error"))
        if isinstance(body, dict) and "error" in body
        else (raw.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}")
    )
    lowered = message.lower()
    error_class: ErrorClass = status_class(status)
    if status == 404 or ("not found" in lowered and "model" in lowered):
        error_class = "not_found"
        if "pull" not in lowered:
            message += " (pull it first: `ollama pull <model>`)"
    elif "context" in lowered and ("exceed" in lowered or "too long" in lowered):
        error_class = "context_length"
    elif status == 503 and "loading" in lowered:
        error_class = "model_not_loaded"
    return ProviderError(error_class, f"Ollama: {message}", status=status, retry_after=parse_retry_after(headers))
