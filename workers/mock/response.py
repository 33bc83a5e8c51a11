"""The mock's chunks, whole -> a canonical Response (the non-streaming path)."""

from __future__ import annotations

from typing import Any

from ...protocol.accumulate import parse_arguments
from ...protocol.messages import (
    ContentPart,
    FinishReason,
    Message,
    RedactedThinkingPart,
    Response,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    Usage,
)

_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "error": "error",
}


def finish_reason(raw: str) -> FinishReason:
    if raw.startswith("stop_sequence:"):
        return FinishReason(reason="stop", raw="stop_sequence", stop_sequence=raw.split(":", 1)[1])
    return FinishReason(reason=_REASONS.get(raw, "other"), raw=raw)  # type: ignore[arg-type]


def usage(chunk: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=chunk.get("input_tokens", 0),
        output_tokens=chunk.get("output_tokens", 0),
        reasoning_tokens=chunk.get("reasoning_tokens", 0),
        cache_read_tokens=chunk.get("cache_read_tokens", 0),
        cache_write_tokens=chunk.get("cache_write_tokens", 0),
    )


def parse(chunks: list[dict[str, Any]]) -> Response:
    content: list[ContentPart] = []
    model = ""
    result_usage = Usage()
    reason = FinishReason(reason="stop", raw="stop")
    tools: dict[str, tuple[str, list[str]]] = {}
    for chunk in chunks:
        kind = chunk["kind"]
        last = content[-1] if content else None
        if kind == "start":
            model = chunk.get("model", "")
        elif kind == "text":
            if type(last) is TextPart:
                last.text += chunk["text"]
            else:
                content.append(TextPart(text=chunk["text"]))
        elif kind == "reasoning":
            if type(last) is ThinkingPart and last.signature is None:
                last.text += chunk["text"]
            else:
                content.append(ThinkingPart(text=chunk["text"]))
        elif kind == "signature":
            if type(last) is ThinkingPart:
                last.signature = chunk["signature"]
            else:
                content.append(ThinkingPart(text="", signature=chunk["signature"]))
        elif kind == "redacted":
            content.append(RedactedThinkingPart(data=chunk["data"]))
        elif kind == "tool_start":
            tools[chunk["id"]] = (chunk["name"], [])
            content.append(ToolCallPart(id="", name=chunk["name"], provider_id=chunk["id"]))
        elif kind == "tool_args":
            tools[chunk["id"]][1].append(chunk["json"])
        elif kind == "usage":
            result_usage = usage(chunk)
        elif kind == "finish":
            reason = finish_reason(chunk["reason"])
    for part in content:
        if type(part) is ToolCallPart:
            raw = "".join(tools[part.provider_id or ""][1])
            args = parse_arguments(raw)
            part.arguments = args if args is not None else {}
            part.raw_arguments = raw or None
    return Response(
        model=model, message=Message(role="assistant", content=content), finish_reason=reason, usage=result_usage
    )
