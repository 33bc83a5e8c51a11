"""A canonical `Response` as Anthropic's Messages `message`, and a stream's canonical
events as its server-sent events (`message_start`, `ping`, `content_block_start` /
`_delta` / `_stop`, `message_delta`, `message_stop`; `error`). Pure.

Blocks are numbered as the client sees them: parts with no Messages form (another
API's opaque parts, images a model drew) are left out. Thinking signatures and
redacted data go out byte for byte; tool calls carry their canonical ids; the stop
reason is the provider's own word when it is one of Anthropic's; usage is
Anthropic's, whose `input_tokens` leaves out what the cache read and wrote.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..protocol.ids import ulid
from ..protocol.messages import (
    ContentPart,
    ErrorInfo,
    Finish,
    FinishReason,
    ProviderPart,
    ProviderPartEvent,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    RedactedThinkingPart,
    Response,
    StreamEvent,
    TextDelta,
    TextEnd,
    TextPart,
    TextStart,
    ThinkingPart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallPart,
    ToolCallStart,
    Usage,
)
from . import sse
from .errors import body_of

#: `ProviderPart.api` of Anthropic's blocks (the Anthropic worker's).
API = "anthropic"
#: The part the Anthropic worker makes of a code-execution container: the message's `container`.
CONTAINER = "container"

STOP_REASONS = frozenset(
    {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal", "model_context_window_exceeded"}
)
_STOP_OF = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}

# A delta is most of a stream: written from bytes made once per block, around the
# one JSON string it carries (the same bytes `sse.event` would make of its dict).
_encode = msgspec.json.encode
_DELTA_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_DELTA_OF = {
    "text": b',"delta":{"type":"text_delta","text":',
    "thinking": b',"delta":{"type":"thinking_delta","thinking":',
    "tool_use": b',"delta":{"type":"input_json_delta","partial_json":',
}
_DELTA_TAIL = b"}}\n\n"


def stop_reason(finish: FinishReason) -> str:
    """Anthropic's stop reason: the provider's own word when it is one of Anthropic's."""
    if finish.raw in STOP_REASONS:
        return finish.raw
    if finish.stop_sequence:
        return "stop_sequence"
    return _STOP_OF.get(finish.reason, "end_turn")


def usage_body(usage: Usage) -> dict[str, Any]:
    """Anthropic's usage: its `input_tokens` leaves out what the cache read and wrote."""
    read, write = usage.cache_read_tokens, usage.cache_write_tokens
    long = min(usage.cache_write_long_tokens, write)
    return {
        "input_tokens": max(usage.input_tokens - read - write, 0),
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": write - long, "ephemeral_1h_input_tokens": long},
    }


def block_of(part: ContentPart) -> dict[str, Any] | None:
    """A response part as an Anthropic content block (None: it has no Messages form)."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ThinkingPart):
        return {"type": "thinking", "thinking": part.text, "signature": part.signature or ""}
    if isinstance(part, RedactedThinkingPart):
        return {"type": "redacted_thinking", "data": part.data}
    if isinstance(part, ToolCallPart):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments or {}}
    if isinstance(part, ProviderPart) and part.api == API and part.kind != CONTAINER and isinstance(part.data, dict):
        return part.data
    return None


def message_body(response: Response, model: str) -> dict[str, Any]:
    content = []
    container = None
    for part in response.message.content:
        if isinstance(part, ProviderPart) and part.api == API and part.kind == CONTAINER:
            container = part.data
            continue
        block = block_of(part)
        if block is not None:
            content.append(block)
    body: dict[str, Any] = {
        "id": response.id if response.id.startswith("msg_") else f"msg_{ulid()}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(response.finish_reason),
        "stop_sequence": response.finish_reason.stop_sequence,
        "usage": usage_body(response.usage),
    }
    if container is not None:
        body["container"] = container
    return body


class MessageStream:
    """One stream's canonical events as Anthropic's server-sent events.

    Blocks are numbered as the client sees them (parts with no Messages form are
    left out). A reasoning part opens as `thinking` at its first text, or, when it
    ends with encrypted data and no text, as `redacted_thinking` whole."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.began = False
        self._blocks: dict[int, int] = {}  # canonical index -> block index
        self._deltas: dict[int, bytes] = {}  # canonical index -> its deltas' bytes up to the string
        self._reasoning: set[int] = set()  # reasoning parts not opened yet
        self._argued: set[int] = set()  # tool calls whose arguments went as deltas
        self._container: Any = None

    def _begin(self) -> list[bytes]:
        self.began = True
        message: dict[str, Any] = {
            "id": f"msg_{ulid()}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            # Usage is known at the end: message_delta carries every figure.
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [
            sse.event("message_start", {"type": "message_start", "message": message}),
            sse.event("ping", {"type": "ping"}),
        ]

    def _open(self, index: int, block: dict[str, Any]) -> bytes:
        at = self._blocks[index] = len(self._blocks)
        kind = _DELTA_OF.get(block["type"])
        if kind is not None:
            self._deltas[index] = _DELTA_HEAD + str(at).encode() + kind
        return sse.event("content_block_start", {"type": "content_block_start", "index": at, "content_block": block})

    def _delta(self, index: int, text: str) -> bytes:
        return self._deltas[index] + _encode(text) + _DELTA_TAIL

    def _stop(self, index: int) -> bytes:
        return sse.event("content_block_stop", {"type": "content_block_stop", "index": self._blocks[index]})

    def events(self, event: StreamEvent) -> list[bytes]:
        if isinstance(event, TextDelta) and self.began:
            return [self._delta(event.index, event.text)] if event.text else []
        out = [] if self.began else self._begin()
        if isinstance(event, TextDelta):
            if event.text:
                out.append(self._delta(event.index, event.text))
        elif isinstance(event, ReasoningDelta):
            if event.index in self._reasoning:
                self._reasoning.discard(event.index)
                out.append(self._open(event.index, {"type": "thinking", "thinking": "", "signature": ""}))
            if event.text:
                out.append(self._delta(event.index, event.text))
        elif isinstance(event, ToolCallDelta):
            if event.partial_json:
                self._argued.add(event.index)
                out.append(self._delta(event.index, event.partial_json))
        elif isinstance(event, TextStart):
            out.append(self._open(event.index, {"type": "text", "text": ""}))
        elif isinstance(event, TextEnd):
            out.append(self._stop(event.index))
        elif isinstance(event, ReasoningStart):
            self._reasoning.add(event.index)
        elif isinstance(event, ReasoningEnd):
            out += self._reasoning_end(event)
        elif isinstance(event, ToolCallStart):
            block = {"type": "tool_use", "id": event.id, "name": event.name, "input": {}}
            out.append(self._open(event.index, block))
        elif isinstance(event, ToolCallEnd):
            if event.index not in self._argued and (event.raw_arguments or event.arguments):
                # A provider that gives the arguments whole: one delta holds them.
                whole = event.raw_arguments or _encode(event.arguments).decode()
                out.append(self._delta(event.index, whole))
            out.append(self._stop(event.index))
        elif isinstance(event, ProviderPartEvent):
            if event.api == API and event.kind == CONTAINER:
                self._container = event.data
            elif event.api == API and isinstance(event.data, dict):
                out += [self._open(event.index, event.data), self._stop(event.index)]
        elif isinstance(event, Finish):
            out += self._finish(event.response)
        return out

    def _reasoning_end(self, event: ReasoningEnd) -> list[bytes]:
        out = []
        if event.index in self._reasoning:
            self._reasoning.discard(event.index)
            if event.redacted_data is not None:
                block = {"type": "redacted_thinking", "data": event.redacted_data}
                return [self._open(event.index, block), self._stop(event.index)]
            out.append(self._open(event.index, {"type": "thinking", "thinking": "", "signature": ""}))
        if event.signature:
            delta = {"type": "signature_delta", "signature": event.signature}
            data = {"type": "content_block_delta", "index": self._blocks[event.index], "delta": delta}
            out.append(sse.event("content_block_delta", data))
        out.append(self._stop(event.index))
        return out

    def _finish(self, response: Response) -> list[bytes]:
        delta: dict[str, Any] = {
            "stop_reason": stop_reason(response.finish_reason),
            "stop_sequence": response.finish_reason.stop_sequence,
        }
        if self._container is not None:
            delta["container"] = self._container
        return [
            sse.event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage_body(response.usage)}),
            sse.event("message_stop", {"type": "message_stop"}),
        ]

    def error(self, info: ErrorInfo, status: int) -> list[bytes]:
        return [sse.event("error", body_of(info, "anthropic", status))]

    def end(self) -> list[bytes]:
        return []
