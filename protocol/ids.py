"""Identifiers: ULIDs (time-ordered, 26 Crockford base32 characters)."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
#: Every pair of characters, for 10 bits at a time: a ULID is made per request.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_SHIFTS = range(120, -1, -10)


def ulid() -> str:
    """A new ULID: 48 bits of milliseconds, then 80 random bits (26 characters, 130 bits)."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])


def tool_call_id() -> str:
    """A canonical tool-call id, the form clients see for every provider."""
    return "tu_" + ulid()


def request_id() -> str:
    return "req_" + ulid()
