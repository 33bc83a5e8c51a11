"""Gemini's finish reasons and usage in canonical form, for the stream translator. Pure.

A whole `generateContent` body is one chunk of a stream: the worker reads it
through the stream translator (`stream.py`, framing `sse_or_json`), so the two
forms cannot disagree about parts, signatures, finish reasons or usage. A long
generation (Gemini's long decode) is one request per hop; the translator keeps
its parts open across the hops and sums their usage.
"""

from __future__ import annotations

from typing import Any

from ...protocol.messages import FinishReason, FinishReasonName, Usage

#: Candidate.FinishReason by name, and by number for the `enum-encoding=int` form.
_FINISH: dict[str, FinishReasonName] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
    "IMAGE_OTHER": "content_filter",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
    "TOO_MANY_TOOL_CALLS": "error",
    "MISSING_THOUGHT_SIGNATURE": "error",
    "MALFORMED_RESPONSE": "error",
    "CONTINUATION": "length",  # only when we stop following continuations
}
FINISH_NUMBERS = {
    0: "FINISH_REASON_UNSPECIFIED",
    1: "STOP",
    2: "MAX_TOKENS",
    3: "SAFETY",
    4: "RECITATION",
    5: "OTHER",
    6: "LANGUAGE",
    7: "BLOCKLIST",
    8: "PROHIBITED_CONTENT",
    9: "SPII",
    10: "MALFORMED_FUNCTION_CALL",
    11: "IMAGE_SAFETY",
    12: "UNEXPECTED_TOOL_CALL",
    13: "TOO_MANY_TOOL_CALLS",
}
BLOCK_NUMBERS = {
    0: "BLOCK_REASON_UNSPECIFIED",
    1: "SAFETY",
    2: "OTHER",
    3: "BLOCKLIST",
    4: "PROHIBITED_CONTENT",
    5: "IMAGE_SAFETY",
}


def enum_name(value: Any, numbers: dict[int, str]) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return numbers.get(value, str(value))
    return str(value)


def finish_reason(raw: str | None, made_calls: bool) -> FinishReason:
    # A turn that calls functions still says STOP: the parts tell.
    if raw == "STOP" and made_calls:
        return FinishReason(reason="tool_calls", raw=raw)
    return FinishReason(reason=_FINISH.get(raw or "", "other"), raw=raw)


def usage(meta: dict[str, Any]) -> Usage:
    """Canonical usage from one `usageMetadata` (running totals: the caller keeps the last)."""
    prompt = int(meta.get("promptTokenCount") or 0) + int(meta.get("toolUsePromptTokenCount") or 0)
    thoughts = int(meta.get("thoughtsTokenCount") or 0)
    output = int(meta.get("candidatesTokenCount") or 0) + thoughts
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=prompt + output,
        reasoning_tokens=thoughts,
        cache_read_tokens=int(meta.get("cachedContentTokenCount") or 0),
    )
