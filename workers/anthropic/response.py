"""Anthropic Messages response body -> canonical Response. Pure.

Also the mappings the stream translator shares: stop reasons, usage and the
opaque parts. Anthropic reports cached prompt tokens beside `input_tokens`; the
canonical `input_tokens` counts all of them, so they are added in here. Blocks
with no canonical type (server tools' calls and results, MCP, compaction) and
the code-execution container become `ProviderPart`s, kept verbatim so that a
continuation can send them back.
"""

from __future__ import annotations

import json
from typing import Any

from ...protocol.accumulate import parse_arguments
from ...protocol.messages import (
    ContentPart,
    FinishReason,
    FinishReasonName,
    Message,
    ProviderPart,
    RedactedThinkingPart,
    Response,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    Usage,
)
from ...protocol.tokens import estimate_text_tokens
from ..errors import invalid_response
from .errors import from_error_object

#: `ProviderPart.api` for everything this folder produces: the Messages wire format.
API = "anthropic"
#: The kind of the part that carries the code-execution container (`{id, expires_at}`):
#: it is not a block, the request translator sends its id back as `container`.
CONTAINER = "container"

_STOP: dict[str, FinishReasonName] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason(stop_reason: str | None, stop_sequence: str | None = None) -> FinishReason:
    return FinishReason(
        reason=_STOP.get(stop_reason or "", "other"),
        raw=stop_reason,
        stop_sequence=stop_sequence if stop_reason == "stop_sequence" else None,
    )


def _billed_steps(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The model calls a response was billed for. With server-side compaction, `iterations`
    lists each one (the compaction step, then the message) and the top-level figures
    are the final message's alone; without it, the top level is the only step."""
    iterations = raw.get("iterations")
    steps = [it for it in iterations if isinstance(it, dict)] if isinstance(iterations, list) else []
    if not steps:
        return [raw]
    if not any(it.get("type") == "message" for it in steps):
        steps.append(raw)  # never seen: the message's own step missing from the list
    return steps


def usage(raw: dict[str, Any], thinking_text: str = "") -> Usage:
    """Canonical usage from Anthropic's usage object (the last report wins, never summed),
    over every billed step (`iterations`)."""
    steps = _billed_steps(raw)
    read = sum(int(s.get("cache_read_input_tokens") or 0) for s in steps)
    write = sum(int(s.get("cache_creation_input_tokens") or 0) for s in steps)
    prompt = sum(int(s.get("input_tokens") or 0) for s in steps) + read + write
    output = sum(int(s.get("output_tokens") or 0) for s in steps)
    # The 1-hour writes inside that total cost more than the 5-minute ones.
    write_long = min(
        sum(
            int(s["cache_creation"].get("ephemeral_1h_input_tokens") or 0)
            for s in steps
            if isinstance(s.get("cache_creation"), dict)
        ),
        write,
    )
    details = raw.get("output_tokens_details") or {}
    reported = details.get("thinking_tokens") if isinstance(details, dict) else None
    estimated = False
    if reported is None:
        # Not reported: estimate from the thinking text we were shown (a summary on
        # newer models, so this can only undercount) and say it is an estimate.
        reported = estimate_text_tokens(thinking_text) if thinking_text else 0
        estimated = bool(thinking_text)
    result = Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=prompt + output,
        reasoning_tokens=min(int(reported), output) if output else int(reported),
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_long_tokens=write_long,
    )
    return result.mark_estimated("reasoning_tokens") if estimated else result


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
            raw = None
            if isinstance(arguments, str):  # never seen, but cheap to accept
                raw, arguments = arguments, parse_arguments(arguments)
            elif not isinstance(arguments, dict):
                raw, arguments = json.dumps(arguments), None
            parts.append(
                ToolCallPart(
                    id="",
                    name=block.get("name", ""),
                    arguments=arguments,
                    raw_arguments=raw,
                    provider_id=block.get("id"),
                )
            )
        elif isinstance(kind, str) and kind:
            # server_tool_use, *_tool_result, mcp_tool_use/result, compaction... Anthropic ties
            # none of them to the model that wrote them, so `model` stays unset.
            parts.append(ProviderPart(api=API, kind=str(kind), data=block))
    return parts, "".join(thinking)


def container_part(container: Any) -> ProviderPart | None:
    """The code-execution container a response names, as a part (None when it names none)."""
    if isinstance(container, dict) and container.get("id"):
        return ProviderPart(api=API, kind=CONTAINER, data=container)
    return None


def parse(body: Any, include_raw: bool = False) -> Response:
    """A whole Messages body: the response, or the error it reports."""
    if isinstance(body, dict) and body.get("type") == "error":
        error = body.get("error")
        if not isinstance(error, dict):
            error = {}
        raise from_error_object(error.get("type"), str(error.get("message") or "error"))
    if not isinstance(body, dict) or not isinstance(body.get("content"), list):
        raise invalid_response(f"not an Anthropic message: {str(body)[:200]}")
    parts, thinking = content(body["content"])
    container = container_part(body.get("container"))
    if container is not None:
        parts.append(container)
    return Response(
        id=body.get("id", ""),
        model=body.get("model", ""),
        message=Message(role="assistant", content=parts),
        finish_reason=finish_reason(body.get("stop_reason"), body.get("stop_sequence")),
        usage=usage(body.get("usage") or {}, thinking),
        raw=body if include_raw else None,
    )
