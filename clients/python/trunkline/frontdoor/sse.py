"""Server-sent events, as the APIs send them."""

from __future__ import annotations

from typing import Any

import msgspec

_encode = msgspec.json.encode


def event(name: str | None, data: Any) -> bytes:
    """One event: `event: NAME` when the API names its events (Anthropic, OpenAI's
    Responses), then its JSON as `data:`."""
    body = b"data: " + _encode(data) + b"\n\n"
    return b"event: " + name.encode() + b"\n" + body if name else body


DONE = b"data: [DONE]\n\n"
