"""The mock's wire format, both ways: what a request becomes for its playback (a
script, or an `Echo`), and the chunks the playback streams back, each one JSON
object tagged by `kind` in a message of its own, which the stream translator reads
as any provider's bytes."""

from __future__ import annotations

from typing import Any

import msgspec


class Echo(msgspec.Struct, frozen=True, kw_only=True):
    """The default reply: `text` word by word, cut where `max_tokens` runs out, then the
    usage and the finish (`stop` names the stop sequence the text was cut at)."""

    text: str
    stop: str | None = None
    max_tokens: int | None = None
    delay: float = 0.0  # pause before each word
    input_tokens: int = 0


class Chunk(msgspec.Struct, tag_field="kind", omit_defaults=True):
    """One message of the mock's stream."""


class Start(Chunk, tag="start"):
    model: str


class Text(Chunk, tag="text"):
    text: str


class Reasoning(Chunk, tag="reasoning"):
    text: str


class Signature(Chunk, tag="signature"):
    signature: str


class Redacted(Chunk, tag="redacted"):
    data: str


class ToolStart(Chunk, tag="tool_start"):
    id: str
    name: str


class ToolArgs(Chunk, tag="tool_args"):
    id: str
    json: str


class ToolEnd(Chunk, tag="tool_end"):
    id: str


class Usage(Chunk, tag="usage"):
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class Finish(Chunk, tag="finish"):
    reason: str  # a canonical reason, or `stop_sequence:<the sequence>`


class ProviderEvent(Chunk, tag="event"):
    """Something only `passthrough` shows: the mock's stand-in for a provider's own events."""

    data: dict[str, Any]


AnyChunk = (
    Start | Text | Reasoning | Signature | Redacted | ToolStart | ToolArgs | ToolEnd | Usage | Finish | ProviderEvent
)

encode = msgspec.json.Encoder().encode
decoder = msgspec.json.Decoder(AnyChunk)
