"""Message contents on a span, in the GenAI conventions' form (`telemetry.capture_content` only).

Prompts and answers may hold personal data, so they are off unless the operator
asks. Media go by kind, type and URL, never their bytes: a base64 image has no
place in a span (collectors cap attribute sizes, and traces are kept long).
"""

from __future__ import annotations

import json
from typing import Any

from ..protocol.messages import (
    AudioPart,
    DocumentPart,
    ImagePart,
    Message,
    Request,
    Response,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)


def input_content(request: Request) -> dict[str, str]:
    system = [m for m in request.messages if m.role in ("system", "developer")]
    rest = [m for m in request.messages if m.role not in ("system", "developer")]
    out = {"gen_ai.input.messages": json.dumps([message_json(m) for m in rest], ensure_ascii=False)}
    if system:
        out["gen_ai.system_instructions"] = json.dumps(
            [part for m in system for part in message_json(m)["parts"]], ensure_ascii=False
        )
    if request.tools:
        out["gen_ai.tool.definitions"] = json.dumps(
            [
                {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
                for t in request.tools
            ],
            ensure_ascii=False,
        )
    return out


#: Our finish reasons in the conventions' words (their list: stop, length, content_filter,
#: tool_call, error). `cancelled` and `other` have none.
FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_calls": "tool_call",
    "error": "error",
}


def finish_reason(reason: str) -> str | None:
    return FINISH_REASONS.get(reason)


def output_content(response: Response) -> str:
    # An output message must say why it ended; where the conventions have no word,
    # their schema takes any string: ours.
    reason = response.finish_reason.reason
    return json.dumps(
        [{**message_json(response.message), "finish_reason": finish_reason(reason) or reason}], ensure_ascii=False
    )


_MEDIA = {ImagePart: "image", AudioPart: "audio", DocumentPart: "document"}


def message_json(message: Message) -> dict[str, Any]:
    """The conventions' message form: a role and typed parts. Media go by kind and
    URL only: their bytes do not belong on a span."""
    parts: list[dict[str, Any]] = []
    for part in message.content:
        match part:
            case TextPart():
                parts.append({"type": "text", "content": part.text})
            case ThinkingPart():
                parts.append({"type": "reasoning", "content": part.text})
            case ToolCallPart():
                parts.append({"type": "tool_call", "id": part.id, "name": part.name, "arguments": part.arguments})
            case ToolResultPart():
                content = part.content
                parts.append(
                    {
                        "type": "tool_call_response",
                        "id": part.tool_call_id,
                        "response": content
                        if isinstance(content, str)
                        else "".join(p.text for p in content if isinstance(p, TextPart)),
                    }
                )
            case ImagePart() | AudioPart() | DocumentPart():
                url = part.url
                media: dict[str, Any] = {
                    "type": "uri" if url and not url.startswith("data:") else "blob",
                    "modality": _MEDIA[type(part)],
                }
                if media["type"] == "uri":
                    media["uri"] = url
                if part.media_type:
                    media["mime_type"] = part.media_type
                parts.append(media)
            # Opaque provider parts and encrypted reasoning say nothing a reader could use.
    role = (
        "assistant"
        if message.role == "assistant"
        else "tool"
        if message.role == "tool"
        else "system"
        if message.role in ("system", "developer")
        else "user"
    )
    return {"role": role, "parts": parts}
