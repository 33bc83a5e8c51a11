"""Anthropic Messages response body -> canonical Response. Pure.

Also the mappings the stream translator shares: stop reasons and usage.
Anthropic reports cached prompt tokens beside `input_tokens`; the canonical
`input_tokens` counts all of them, so they are added in here.
"""

from __future__ import annotations

from typing import Any

from ...protocol.accumulate import parse_arguments
from ...protocol.messages import (
    ContentPart,
    FinishReason,
    FinishReasonName,
    Message,
    RedactedThinkingPart,
    Response,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    Usage,
)
from ...protocol.tokens import estimate_text_tokens
from ..errors import invalid_response

_STOP: dict[str, FinishReasonName] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason(stop_reason: str | None, stop_sequence: str | None = None) -> FinishReason:
    return FinishReason(reason=_STOP.get(stop_reason or "", "other"), raw=stop_reason,
                        stop_sequence=stop_sequence if stop_reason == "stop_sequence" else None)


def usage(raw: dict[str, Any], thinking_text: str = "") -> Usage:
    """Canonical usage from Anthropic's usage object (the last report wins, never summed)."""
    read = int(raw.get("cache_read_input_tokens") or 0)
    write = int(raw.get("cache_creation_input_tokens") or 0)
    # The 1-hour writes inside that total cost more than the 5-minute ones.
    split = raw.get("cache_creation") if isinstance(raw.get("cache_creation"), dict) else {}
    write_long = min(int(split.get("ephemeral_1h_input_tokens") or 0), write)
    prompt = int(raw.get("input_tokens") or 0) + read + write
    output = int(raw.get("output_tokens") or 0)
    details = raw.get("output_tokens_details") or {}
    reported = details.get("thinking_tokens") if isinstance(details, dict) else None
    estimated = False
    if reported is None:
        # Not reported: estimate from the thinking text we were shown (a summary on
        # newer models, so this can only undercount) and say it is an estimate.
        reported = estimate_text_tokens(thinking_text) if thinking_text else 0
        estimated = bool(thinking_text)
    return Usage(input_tokens=prompt, output_tokens=output, total_tokens=prompt + output,
                 reasoning_tokens=min(int(reported), output) if output else int(reported),
                 cache_read_tokens=read, cache_write_tokens=write, cache_write_long_tokens=write_long,
                 estimated=estimated)


def content(blocks: list[dict[str, Any]]) -> tuple[list[ContentPart], str]:
    """Content parts, and the thinking text (for the reasoning estimate)."""
    parts: list[ContentPart] = []
    thinking: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(text=block.get("text", "")))
        elif kind == "thinking":
            text = block.get("thinking", "")
            thinking.append(text)
            parts.append(ThinkingPart(text=text, signature=block.get("signature") or None))
        elif kind == "redacted_thinking":
            parts.append(RedactedThinkingPart(data=block.get("data", "")))
        elif kind == "tool_use":
            arguments = block.get("input")
            if isinstance(arguments, str):  # never seen, but cheap to accept
                arguments = parse_arguments(arguments)
            if not isinstance(arguments, dict):
                raise invalid_response(f"tool_use block {block.get('id')!r} has input that is not an object")
            parts.append(ToolCallPart(id="", name=block.get("name", ""), arguments=arguments,
                                      provider_id=block.get("id")))
        # server tools' blocks (server_tool_use, web_search_tool_result, mcp_*...) are the
        # provider's own business: they stay in `raw`.
    return parts, "".join(thinking)


def parse(body: Any, include_raw: bool = False) -> Response:
    if not isinstance(body, dict) or body.get("type") == "error" or not isinstance(body.get("content"), list):
        raise invalid_response(f"not an Anthropic message: {str(body)[:200]}")
    parts, thinking = content(body["content"])
    return Response(
        id=body.get("id", ""),
        model=body.get("model", ""),
        message=Message(role="assistant", content=parts),
        finish_reason=finish_reason(body.get("stop_reason"), body.get("stop_sequence")),
        usage=usage(body.get("usage") or {}, thinking),
        raw=body if include_raw else None,
    )
