"""Where each provider type's API is when a provider's config gives no base_url.

A table of its own, so the supervisor (OpenTelemetry's `server.address`) reads the
same URLs the workers call without loading any worker code.
"""

from __future__ import annotations

from typing import Final

#: Provider type -> the URL its worker calls by default. `mock` calls nothing, and an
#: `openai_compat` instance is reached only through the base_url its config gives.
DEFAULT_BASE_URLS: Final[dict[str, str]] = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
    "gemini": "https://generativelanguage.googleapis.com",
    "ollama": "http://127.0.0.1:11434",
}
