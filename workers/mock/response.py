"""The mock's finish reasons and usage in canonical form, for the stream translator. Pure.

A whole response is the stream gathered, as for every provider: the worker
reads the playback through the stream translator either way."""

from __future__ import annotations

from ...protocol.messages import FinishReason, FinishReasonName, Usage
from . import wire

_REASONS: dict[str, FinishReasonName] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "error": "error",
}


def finish_reason(raw: str) -> FinishReason:
    if raw.startswith("stop_sequence:"):
        return FinishReason(reason="stop", raw="stop_sequence", stop_sequence=raw.split(":", 1)[1])
    return FinishReason(reason=_REASONS.get(raw, "other"), raw=raw)


def usage(chunk: wire.Usage) -> Usage:
    return Usage(
        input_tokens=chunk.input_tokens,
        output_tokens=chunk.output_tokens,
        reasoning_tokens=chunk.reasoning_tokens,
        cache_read_tokens=chunk.cache_read_tokens,
        cache_write_tokens=chunk.cache_write_tokens,
    )
