"""Responses API response object -> canonical Response. Pure.

Also what the stream translator shares: the finish reason from `status` and
`incomplete_details`, usage, and the opaque parts. Output items become parts
in order: a `message` gives text (a `refusal` too, as text, with finish reason
content_filter), a `reasoning` item gives one thinking part per summary (or
reasoning text) and then the item itself as an opaque part for the next turn,
a `function_call` gives a client tool call; every other item (built-in tools,
compaction, MCP...) is an opaque part, never a client tool call.
"""

from __future__ import annotations

from typing import Any

from ...protocol.accumulate import parse_arguments
from ...protocol.messages import (
    ContentPart,
    FinishReason,
    Message,
    ModelInfo,
    ProviderPart,
    Response,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    Usage,
)
from ..errors import invalid_response
from .errors import from_error_object
from .request import API


def finish_reason(status: str | None, incomplete: Any, has_calls: bool, refused: bool) -> FinishReason:
    reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
    if status == "completed":
        if has_calls:
            return FinishReason(reason="tool_calls", raw=status)
        if refused:
            return FinishReason(reason="content_filter", raw="refusal")
        return FinishReason(reason="stop", raw=status)
    if status == "incomplete":
        if reason == "max_output_tokens":
            return FinishReason(reason="length", raw=reason)
        if reason == "content_filter":
            return FinishReason(reason="content_filter", raw=reason)
        return FinishReason(reason="other", raw=reason or status)
    return FinishReason(reason="other", raw=status)


def usage(raw: Any) -> Usage:
    """Canonical usage: cached tokens are already part of `input_tokens`, reasoning of `output_tokens`."""
    if not isinstance(raw, dict):
        return Usage()
    prompt = int(raw.get("input_tokens") or 0)
    output = int(raw.get("output_tokens") or 0)
    details = raw.get("input_tokens_details") or {}
    out_details = raw.get("output_tokens_details") or {}
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=prompt + output,
        reasoning_tokens=int(out_details.get("reasoning_tokens") or 0),
        cache_read_tokens=int(details.get("cached_tokens") or 0),
        cache_write_tokens=int(details.get("cache_write_tokens") or 0),
    )


def part_model(model: ModelInfo) -> str | None:
    """The model an opaque reasoning part is tied to, where the catalog says OpenAI ties it."""
    return model.wire_name if model.rules.thinking_tied_to_model else None


def opaque(item: dict[str, Any], model: ModelInfo) -> ProviderPart:
    kind = str(item.get("type") or "unknown")
    return ProviderPart(api=API, kind=kind, data=item, model=part_model(model) if kind == "reasoning" else None)


def phase_marker(item: dict[str, Any]) -> ProviderPart | None:
    """A message item's phase (commentary / final_answer), kept so it goes back with its text."""
    phase = item.get("phase")
    if not phase:
        return None
    return ProviderPart(api=API, kind="message", data={"type": "message", "id": item.get("id"), "phase": phase})


def reasoning_texts(item: dict[str, Any]) -> list[str]:
    """What a reasoning item shows people: its summaries, else its raw reasoning text."""
    texts = [s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)]
    if not texts:
        texts = [c.get("text", "") for c in item.get("content") or [] if isinstance(c, dict)]
    return [t for t in texts if t]


def call_arguments(raw: str, name: str) -> dict[str, Any] | None:
    """The arguments as an object; None when they are not one (the call stays, with its raw text)."""
    return parse_arguments(raw)


def item_parts(item: dict[str, Any], model: ModelInfo) -> tuple[list[ContentPart], bool]:
    """The parts of one output item, and whether it refused."""
    kind = item.get("type")
    if kind == "message":
        parts: list[ContentPart] = []
        marker = phase_marker(item)
        if marker is not None:
            parts.append(marker)
        refused = False
        for block in item.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "output_text" and block.get("text"):
                parts.append(TextPart(text=block["text"]))
            elif block.get("type") == "refusal":
                refused = True
                if block.get("refusal"):
                    parts.append(TextPart(text=block["refusal"]))
        return parts, refused
    if kind == "reasoning":
        thinking: list[ContentPart] = [ThinkingPart(text=t) for t in reasoning_texts(item)]
        return [*thinking, opaque(item, model)], False
    if kind == "function_call":
        raw = item.get("arguments") or ""
        name = item.get("name") or ""
        return [
            ToolCallPart(
                id="",
                name=name,
                arguments=call_arguments(raw, name),
                raw_arguments=raw or None,
                provider_id=item.get("call_id") or None,
            )
        ], False
    return [opaque(item, model)], False


def parse(body: Any, model: ModelInfo, include_raw: bool = False) -> Response:
    """A whole Responses body: the response, or the error it reports."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and "output" not in body:
        raise from_error_object(body["error"])
    if not isinstance(body, dict) or not isinstance(body.get("output"), list):
        raise invalid_response(f"not a Responses API response (no output list): {str(body)[:200]}")
    status = body.get("status")
    if status == "failed":
        error = body.get("error")
        raise from_error_object(error if isinstance(error, dict) else {"message": "the response failed"})
    parts: list[ContentPart] = []
    refused = has_calls = False
    for item in body["output"]:
        if not isinstance(item, dict):
            continue
        item_content, item_refused = item_parts(item, model)
        parts += item_content
        refused = refused or item_refused
        has_calls = has_calls or item.get("type") == "function_call"
    return Response(
        id=body.get("id") or "",
        model=body.get("model") or "",
        message=Message(role="assistant", content=parts),
        finish_reason=finish_reason(status, body.get("incomplete_details"), has_calls, refused),
        usage=usage(body.get("usage")),
        raw=body if include_raw else None,
    )
