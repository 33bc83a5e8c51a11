"""Where each provider type's API is when a provider's config gives no base_url.

A table of its own, so the supervisor (OpenTelemetry's `server.address`) reads the
same URLs the workers call without loading any worker code.
"""

from __future__ import annotations

import urllib.parse
from typing import Final

#: Provider type -> the URL its worker calls by default. `mock` calls nothing, and an
#: `openai_compat` instance is reached only through the base_url its config gives.
DEFAULT_BASE_URLS: Final[dict[str, str]] = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
    "gemini": "https://generativelanguage.googleapis.com",
    "ollama": "http://127.0.0.1:11434",
}

#: Provider type -> the variable its official SDK reads a base URL from, which a provider
#: of that type reads too unless its config names another (`base_url_env`).
BASE_URL_VARIABLES: Final[dict[str, str]] = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "openai": "OPENAI_BASE_URL",
    "gemini": "GEMINI_BASE_URL",
    "ollama": "OLLAMA_HOST",
}

OLLAMA_PORT = 11434


def ollama_host_url(value: str) -> str:
    """`OLLAMA_HOST` as a URL, read as Ollama's own clients read it: the scheme may be left
    out (http), the host (127.0.0.1) and the port (11434; 80 or 443 when the scheme is
    given) too, so `0.0.0.0`, `:8080`, `gpu-box:11434` and `https://ollama.example` all
    name a server."""
    value = value.strip()
    scheme, sep, rest = value.partition("://")
    port = OLLAMA_PORT
    if not sep:
        scheme, rest = "http", value
    elif scheme == "http":
        port = 80
    elif scheme == "https":
        port = 443
    parts = urllib.parse.urlsplit(f"{scheme}://{rest}")
    host = parts.hostname or "127.0.0.1"
    try:
        port = parts.port or port
    except ValueError:
        return value  # a port that is no number: left for the URL check to name
    if ":" in host:
        host = f"[{host}]"
    path = parts.path.rstrip("/")
    return f"{scheme}://{host}:{port}{path}"
