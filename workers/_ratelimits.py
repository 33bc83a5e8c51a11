"""OpenAI's rate-limit headers (`x-ratelimit-*`), which the Responses API and most
Chat Completions servers send alike."""

from __future__ import annotations

import re

import httpx

from ..protocol.messages import RateLimit
from .errors import parse_retry_after

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_s(value: str | None) -> float | None:
    """OpenAI's reset durations: `1s`, `6m0s`, `20ms`."""
    if not value:
        return None
    parts = _DURATION.findall(value)
    if not parts:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def header_int(value: str | None) -> int | None:
    """A count header's value; None when it is missing or not a number."""
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def named(headers: httpx.Headers, prefix: str) -> dict[str, str]:
    """The headers whose names start with `prefix`, and `retry-after` (`-ms`), by their
    lowercase names, read in one pass. Every response goes through this: each
    `Headers.get` scans and lowercases all the headers again, and the seven lookups of
    an OpenAI response (25 headers) cost 25 µs that way. A repeated header's values
    are joined with ", ", as `Headers.get` joins them."""
    wanted = (prefix.encode(), b"retry-after")
    found: dict[str, str] = {}
    for raw_name, raw_value in headers.raw:
        lower = raw_name.lower()
        if lower.startswith(wanted):
            name, value = lower.decode("latin-1"), raw_value.decode("latin-1")
            found[name] = f"{found[name]}, {value}" if name in found else value
    return found


def openai_rate_limit(headers: httpx.Headers) -> RateLimit | None:
    found = named(headers, "x-ratelimit-")
    if not found:
        return None
    return RateLimit(
        requests_limit=header_int(found.get("x-ratelimit-limit-requests")),
        requests_remaining=header_int(found.get("x-ratelimit-remaining-requests")),
        requests_reset_s=duration_s(found.get("x-ratelimit-reset-requests")),
        tokens_limit=header_int(found.get("x-ratelimit-limit-tokens")),
        tokens_remaining=header_int(found.get("x-ratelimit-remaining-tokens")),
        tokens_reset_s=duration_s(found.get("x-ratelimit-reset-tokens")),
        retry_after_s=parse_retry_after(found),
    )
