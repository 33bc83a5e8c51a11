"""Chat Completions response -> canonical Response. Pure.

Also shared with the stream translator: finish reasons, usage, and the rule
for tool-call arguments that do not parse. On a normal finish they are an
`invalid_response` error; under `finish_reason: "error"` (a degraded response,
as the OpenArmature spec calls it) the response is returned, the call's
`arguments` is null and its raw string is kept.
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
    Response,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    Usage,
)
from ...protocol.tokens import estimate_text_tokens
from ..errors import invalid_response
from .errors import from_body

_FINISH: dict[str, FinishReasonName] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
    "error": "error",
}


def finish_reason(raw: str | None) -> FinishReason:
    return FinishReason(reason=_FINISH.get(raw or "", "other"), raw=raw)


def usage(raw: dict[str, Any] | None, reasoning: str = "") -> Usage | None:
    """None when the server reported nothing. Cached and cache-written tokens are within
    the prompt's, as OpenAI counts them (OpenRouter adds `cache_write_tokens`). A server
    that streamed reasoning text but gave no count of its tokens (vLLM, llama.cpp) gets
    an estimate from that text, flagged as one."""
    if not isinstance(raw, dict):
        return None
    prompt = int(raw.get("prompt_tokens") or 0)
    completion = int(raw.get("completion_tokens") or 0)
    prompt_details = raw.get("prompt_tokens_details") or {}
    completion_details = raw.get("completion_tokens_details") or {}
    counted = completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else None
    estimated = counted is None and bool(reasoning)
    thinking = estimate_text_tokens(reasoning) if estimated else int(counted or 0)
    result = Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=prompt + completion,
        reasoning_tokens=min(thinking, completion) if completion else thinking,
        cache_read_tokens=int(prompt_details.get("cached_tokens") or 0),
        cache_write_tokens=int(prompt_details.get("cache_write_tokens") or 0),
    )
    return result.mark_estimated("reasoning_tokens") if estimated else result


def tool_arguments(raw: str, name: str, degraded: bool) -> dict[str, Any] | None:
    """The arguments as an object; None when they are not one (the call stays, with its raw text)."""
    return parse_arguments(raw)


def reasoning_text(message: dict[str, Any]) -> str:
    """Some servers add reasoning beside the content, under one of two names."""
    value = message.get("reasoning_content") or message.get("reasoning") or ""
    return value if isinstance(value, str) else ""


def parse(body: Any, include_raw: bool = False) -> tuple[Response, bool]:
    """A whole chat completion: the response and whether the server reported usage, or
    the error the body reports."""
    if isinstance(body, dict) and "error" in body and "choices" not in body:
        raise from_body(None, body)
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise invalid_response(f"not a chat completion (no choices): {str(body)[:200]}")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise invalid_response("the chat completion's first choice has no message")
    reason = finish_reason(choice.get("finish_reason"))
    degraded = reason.reason == "error"
    parts: list[ContentPart] = []
    thinking = reasoning_text(message)
    if thinking:
        parts.append(ThinkingPart(text=thinking))
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append(TextPart(text=content))
    elif isinstance(content, list):  # a few servers answer with content parts
        text = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if text:
            parts.append(TextPart(text=text))
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise invalid_response("tool_calls is not a list")
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            if degraded:
                continue
            raise invalid_response(f"a tool call without a function: {str(call)[:200]}")
        raw = function.get("arguments")
        if isinstance(raw, dict):  # some servers send an object, not a string
            raw = json.dumps(raw)
        raw = raw if isinstance(raw, str) else ""
        name = function.get("name") or ""
        parts.append(
            ToolCallPart(
                id="",
                name=name,
                arguments=tool_arguments(raw, name, degraded),
                raw_arguments=raw or None,
                provider_id=call.get("id") or None,
            )
        )
    reported = usage(body.get("usage"), thinking)
    return Response(
        id=body.get("id") or "",
        model=body.get("model") or "",
        message=Message(role="assistant", content=parts),
        finish_reason=reason,
        usage=reported or Usage(),
        raw=body if include_raw else None,
    ), reported is not None
