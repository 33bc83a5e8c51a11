"""Identifiers: ULIDs (time-ordered, 26 Crockford base32 characters)."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid() -> str:
    """A new ULID: 48 bits of milliseconds, then 80 random bits."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    out = []
    for _ in range(26):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def tool_call_id() -> str:
    """A canonical tool-call id, the form clients see for every provider."""
    return "tu_" + ulid()


def request_id() -> str:
    return "req_" + ulid()
