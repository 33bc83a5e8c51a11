"""Canonical results -> the Responses API's output items and response object. Pure.

An assistant message's parts become output items in order, the same way whole and
streamed (`openai_responses_stream` builds the same items event by event):

* a text part is one `message` item holding one `output_text`, with the `phase`
  of the OpenAI phase marker (the worker's `message` part) before it, if any;
* a tool call is a `function_call` item whose `call_id` is the canonical call id;
* a run of reasoning parts (thinking, redacted thinking) and of opaque provider
  parts (OpenAI's reasoning item, Gemini's signatures, server-tool blocks) is one
  `reasoning` item: a summary entry per reasoning part, and the run sealed into
  `encrypted_content` when anything in it must come back as it was
  (`openai_responses_carrier`).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from ..protocol.ids import ulid
from ..protocol.messages import (
    ContentPart,
    ErrorInfo,
    FinishReason,
    ProviderPart,
    RedactedThinkingPart,
    Response,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    Usage,
)
from . import openai_responses_carrier as carrier
from .openai_responses_request import OPENAI

_json = msgspec.json.encode


class Ids:
    """The ids of one response and of its output items (unique: they share the response's ULID)."""

    __slots__ = ("_base", "_count", "response")

    def __init__(self) -> None:
        self._base = ulid()
        self._count = 0
        self.response = "resp_" + self._base

    def item(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._base}{self._count:03d}"


def is_phase_marker(part: ProviderPart) -> bool:
    return part.api == OPENAI and part.kind == "message"


def phase_of(part: ProviderPart) -> str | None:
    phase = part.data.get("phase") if isinstance(part.data, dict) else None
    return phase if phase in ("commentary", "final_answer") else None


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(id: str, text: str | None, phase: str | None, status: str = "completed") -> dict[str, Any]:
    """A message item holding one text (None: its content has not begun)."""
    item: dict[str, Any] = {
        "id": id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [] if text is None else [output_text(text)],
    }
    if phase is not None:
        item["phase"] = phase
    return item


def call_arguments(part: ToolCallPart) -> str:
    if part.raw_arguments:
        return part.raw_arguments
    return _json(part.arguments or {}).decode()


def call_item(id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def reasoning_item(id: str, parts: list[carrier.Carried], status: str = "completed") -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": id,
        "type": "reasoning",
        "status": status,
        "summary": [{"type": "summary_text", "text": t} for t in carrier.summaries(parts)],
    }
    if carrier.needs_sealing(parts):
        item["encrypted_content"] = carrier.seal(parts)
    return item


def items_of(content: list[ContentPart], ids: Ids) -> list[dict[str, Any]]:
    """The output items of a whole assistant message."""
    items: list[dict[str, Any]] = []
    carried: list[carrier.Carried] | None = None  # the open reasoning item's parts
    runs: list[tuple[int, str, list[carrier.Carried]]] = []  # reasoning items, sealed once whole
    phase: str | None = None
    for part in content:
        if isinstance(part, (ThinkingPart, RedactedThinkingPart)) or (
            isinstance(part, ProviderPart) and not is_phase_marker(part)
        ):
            if carried is None:
                carried = []
                runs.append((len(items), ids.item("rs"), carried))
                items.append({})
            carried.append(part)
            continue
        carried = None
        if isinstance(part, TextPart):
            items.append(message_item(ids.item("msg"), part.text, phase))
            phase = None
        elif isinstance(part, ToolCallPart):
            items.append(call_item(ids.item("fc"), part.id, part.name, call_arguments(part)))
        elif isinstance(part, ProviderPart):
            phase = phase_of(part)
    for at, id, parts in runs:
        items[at] = reasoning_item(id, parts)
    return items


def usage(u: Usage | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cache_read_tokens, "cache_write_tokens": u.cache_write_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.input_tokens + u.output_tokens,
    }


#: `ResponseError.code` values the SDK knows, for the error classes that have one.
_FAILED_CODES = {
    "rate_limit": "rate_limit_exceeded",
    "quota_exceeded": "rate_limit_exceeded",
    "invalid_request": "invalid_prompt",
    "context_length": "invalid_prompt",
    "content_filter": "invalid_prompt",
}


def failure(info: ErrorInfo) -> dict[str, Any]:
    """The `error` of a failed response object."""
    return {"code": _FAILED_CODES.get(info.error_class, "server_error"), "message": info.message}


def ending(finish: FinishReason) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    """(status, incomplete_details, error) of a response that ended with `finish`."""
    reason = finish.reason
    if reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}, None
    if reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}, None
    if reason == "cancelled":
        return "cancelled", None, None
    if reason == "error":
        message = f"the model's output ended in an error ({finish.raw or 'no reason given'}); what came is kept"
        return "failed", None, {"code": "server_error", "message": message}
    return "completed", None, None


def response_object(
    echo: dict[str, Any],
    ids: Ids,
    created_at: int,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    incomplete: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": ids.response,
        "object": "response",
        "created_at": created_at,
        "completed_at": int(time.time()) if status == "completed" else None,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": incomplete,
        "model": model,
        "output": output,
        "previous_response_id": None,
        "store": False,
        "usage": usage,
        **echo,
    }


def whole(response: Response, echo: dict[str, Any], model: str) -> dict[str, Any]:
    ids = Ids()
    status, incomplete, error = ending(response.finish_reason)
    return response_object(
        echo,
        ids,
        int(time.time()),
        model,
        status,
        items_of(response.message.content, ids),
        usage(response.usage),
        incomplete,
        error,
    )
