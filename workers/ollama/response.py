"""Ollama /api/chat answer -> canonical Response (one object, or the NDJSON lines joined). Pure."""

from __future__ import annotations

import json
from typing import Any

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
from ..errors import ProviderError, invalid_response

_DONE: dict[str, FinishReasonName] = {"stop": "stop", "length": "length"}


def finish_reason(done_reason: str | None, made_tool_calls: bool) -> FinishReason:
    # Ollama says "stop" after tool calls too; the calls are what matter to a caller.
    if made_tool_calls and done_reason in (None, "stop"):
        return FinishReason(reason="tool_calls", raw=done_reason)
    return FinishReason(reason=_DONE.get(done_reason or "", "other"), raw=done_reason)


def usage(line: dict[str, Any]) -> Usage | None:
    if "prompt_eval_count" not in line and "eval_count" not in line:
        return None
    prompt = int(line.get("prompt_eval_count") or 0)
    output = int(line.get("eval_count") or 0)
    return Usage(input_tokens=prompt, output_tokens=output, total_tokens=prompt + output)


def call_arguments(function: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """Ollama sends arguments as an object (some builds as a JSON string); arguments that
    are not an object give None, with the raw text kept."""
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        raw = arguments
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return None, raw
        if not isinstance(arguments, dict):
            return None, raw
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None, json.dumps(arguments, ensure_ascii=False)
    return arguments, json.dumps(arguments, ensure_ascii=False)


def check_error(line: dict[str, Any]) -> None:
    if "error" in line:
        raise ProviderError("server_error", f"Ollama: {line['error']}")


def parse(lines: list[dict[str, Any]], include_raw: bool = False) -> tuple[Response, bool]:
    """From the one object of a non-streamed answer (or every line of a streamed one)."""
    if not lines:
        raise invalid_response("Ollama sent an empty body")
    text: list[str] = []
    thinking: list[str] = []
    parts: list[ContentPart] = []
    last = lines[-1]
    for line in lines:
        if not isinstance(line, dict):
            raise invalid_response(f"not an Ollama chat object: {str(line)[:200]}")
        check_error(line)
        message = line.get("message") or {}
        text.append(message.get("content") or "")
        thinking.append(message.get("thinking") or "")
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments, raw = call_arguments(function)
            parts.append(
                ToolCallPart(
                    id="",
                    name=function.get("name", ""),
                    arguments=arguments,
                    raw_arguments=raw,
                    provider_id=call.get("id") or None,
                )
            )
    head: list[ContentPart] = []
    if "".join(thinking):
        head.append(ThinkingPart(text="".join(thinking)))
    if "".join(text):
        head.append(TextPart(text="".join(text)))
    reported = usage(last)
    return Response(
        model=last.get("model", ""),
        message=Message(role="assistant", content=head + parts),
        finish_reason=finish_reason(last.get("done_reason"), bool(parts)),
        usage=reported or Usage(),
        raw=lines if include_raw else None,
    ), reported is not None
