"""Anthropic server-sent events -> canonical events: a pure state machine.

`message_start` opens, each content block becomes a part (same index),
`message_delta` brings the stop reason and usage totals that replace those of
`message_start`, `message_stop` closes. A block with no canonical type (server
tools, MCP, compaction) is assembled from its deltas and sent whole, as one
`provider_part` event at its `content_block_stop`, in the form Anthropic takes
back; the code-execution container follows the last block as one more. `ping`
and event types we do not know are skipped (or passed through as
`provider_event` on request); an `error` event ends the stream with that error.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...protocol.accumulate import parse_arguments
from ...protocol.messages import (
    Event,
    ProviderEvent,
    ProviderPartEvent,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Response,
    StreamStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from .._contract import Ending
from .._sse import excerpt
from ..errors import ProviderError, invalid_response
from .errors import from_error_object
from .response import API, CONTAINER, container_part, finish_reason, usage


class _Block:
    __slots__ = ("chunks", "data", "id", "kind", "name", "raw", "signature")

    def __init__(
        self, kind: str, id: str = "", name: str = "", data: str | None = None, raw: dict[str, Any] | None = None
    ) -> None:
        self.kind = kind
        self.chunks: list[str] = []
        self.id = id
        self.name = name
        self.signature: str | None = None
        self.data = data
        self.raw = raw  # a provider block as it started, completed by its deltas


class AnthropicStream:
    def __init__(self, passthrough: bool = False) -> None:
        self.passthrough = passthrough
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, Any] = {}
        self._id = ""
        self._model = ""
        self._stop: str | None = None
        self._stop_sequence: str | None = None
        self._thinking: list[str] = []
        self._started = False
        self._stopped = False
        self._container: dict[str, Any] | None = None

    def feed(self, data: bytes, event: str = "message") -> list[Event]:
        try:
            payload = msgspec.json.decode(data)
        except msgspec.DecodeError:
            raise invalid_response(f"Anthropic sent an event that is not JSON: {excerpt(data)!r}") from None
        if not isinstance(payload, dict):
            raise invalid_response(f"Anthropic sent an event that is not an object: {excerpt(data)!r}")
        kind = payload.get("type") or event
        handler = _HANDLERS.get(kind)
        if handler is None:
            if self.passthrough:
                return [ProviderEvent(provider="anthropic", event_type=str(kind), data=payload)]
            return []
        return handler(self, payload)

    # -- event handlers ----------------------------------------------------------

    def _message_start(self, p: dict[str, Any]) -> list[Event]:
        message = p.get("message") or {}
        self._id = message.get("id", "")
        self._model = message.get("model", "")
        self._usage = dict(message.get("usage") or {})
        self._note_container(message.get("container"))
        self._started = True
        return [StreamStart(model=self._model)]

    def _block_start(self, p: dict[str, Any]) -> list[Event]:
        index = int(p.get("index", 0))
        block = p.get("content_block") or {}
        kind = block.get("type")
        if kind == "text":
            self._blocks[index] = b = _Block("text")
            out: list[Event] = [TextStart(index=index)]
            if block.get("text"):
                b.chunks.append(block["text"])
                out.append(TextDelta(index=index, text=block["text"]))
            return out
        if kind == "thinking":
            self._blocks[index] = b = _Block("thinking")
            out = [ReasoningStart(index=index)]
            if block.get("thinking"):
                b.chunks.append(block["thinking"])
                out.append(ReasoningDelta(index=index, text=block["thinking"]))
            b.signature = block.get("signature") or None
            return out
        if kind == "redacted_thinking":
            self._blocks[index] = _Block("redacted", data=block.get("data", ""))
            return [ReasoningStart(index=index)]
        if kind == "tool_use":
            self._blocks[index] = _Block("tool", id=block.get("id", ""), name=block.get("name", ""))
            return [ToolCallStart(index=index, provider_id=block.get("id"), name=block.get("name", ""))]
        if not isinstance(kind, str) or not kind:
            self._blocks[index] = _Block("other")
            return []
        # A server tool's call or result, MCP, compaction...: kept whole, sent at its stop.
        self._blocks[index] = _Block("provider", name=kind, raw=dict(block))
        return []

    def _block_delta(self, p: dict[str, Any]) -> list[Event]:
        index = int(p.get("index", 0))
        block = self._blocks.get(index)
        delta = p.get("delta") or {}
        kind = delta.get("type")
        if block is None:
            raise invalid_response(f"Anthropic sent a delta for block {index}, which never started")
        if kind == "text_delta" and block.kind == "text":
            text = delta.get("text", "")
            if not text:
                return []
            block.chunks.append(text)
            return [TextDelta(index=index, text=text)]
        if kind == "thinking_delta" and block.kind == "thinking":
            text = delta.get("thinking", "")
            if not text:
                return []
            block.chunks.append(text)
            return [ReasoningDelta(index=index, text=text)]
        if kind == "signature_delta" and block.kind == "thinking":
            block.signature = (block.signature or "") + delta.get("signature", "")
            return []
        if kind == "input_json_delta" and block.kind == "tool":
            fragment = delta.get("partial_json", "")
            if not fragment:
                return []
            block.chunks.append(fragment)
            return [ToolCallDelta(index=index, partial_json=fragment)]
        if block.kind == "provider" and block.raw is not None:
            if kind == "input_json_delta":
                block.chunks.append(delta.get("partial_json") or "")
                return []
            if kind == "compaction_delta":
                # The summary (and whatever else the delta carries) arrives in pieces.
                for key, value in delta.items():
                    if key != "type" and isinstance(value, str):
                        block.raw[key] = (block.raw.get(key) or "") + value
                return []
        return (
            [ProviderEvent(provider="anthropic", event_type="content_block_delta", data=p)] if self.passthrough else []
        )

    def _block_stop(self, p: dict[str, Any]) -> list[Event]:
        index = int(p.get("index", 0))
        block = self._blocks.get(index)
        if block is None or block.kind == "other" or block.kind == "done":
            return []
        text = "".join(block.chunks)
        kind, block.kind = block.kind, "done"
        if kind == "text":
            return [TextEnd(index=index, text=text)]
        if kind == "thinking":
            self._thinking.append(text)
            return [ReasoningEnd(index=index, text=text, signature=block.signature)]
        if kind == "redacted":
            return [ReasoningEnd(index=index, redacted_data=block.data)]
        if kind == "provider":
            data = block.raw or {}
            if text.strip():
                arguments = parse_arguments(text)
                if arguments is None:
                    raise invalid_response(
                        f"Anthropic's {block.name} block has input that is not a JSON object: {text[:200]!r}"
                    )
                data["input"] = arguments
            return [ProviderPartEvent(index=index, api=API, kind=block.name, data=data)]
        # Arguments that are not a JSON object stay a tool call, with `arguments` null and
        # the text kept: the caller answers it with an error result and the model can
        # try again, where failing the request would lose what it paid for.
        arguments = parse_arguments(text)
        return [
            ToolCallEnd(index=index, name=block.name, provider_id=block.id, arguments=arguments, raw_arguments=text)
        ]

    def _message_delta(self, p: dict[str, Any]) -> list[Event]:
        delta = p.get("delta") or {}
        if "stop_reason" in delta:
            self._stop = delta.get("stop_reason")
            self._stop_sequence = delta.get("stop_sequence")
        # Cumulative totals: they replace what message_start said, field by field.
        self._usage.update({k: v for k, v in (p.get("usage") or {}).items() if v is not None})
        self._note_container(delta.get("container"))
        return []

    def _note_container(self, container: Any) -> None:
        if isinstance(container, dict) and container.get("id"):
            self._container = container

    def _message_stop(self, p: dict[str, Any]) -> list[Event]:
        if self._stopped:
            return []
        self._stopped = True
        part = container_part(self._container)
        if part is None:
            return []
        # After every block: the container is the response's, not any block's.
        index = max(self._blocks, default=-1) + 1
        return [ProviderPartEvent(index=index, api=API, kind=CONTAINER, data=part.data)]

    def _ping(self, p: dict[str, Any]) -> list[Event]:
        return []

    def _error(self, p: dict[str, Any]) -> list[Event]:
        error = p.get("error") or {}
        raise from_error_object(error.get("type"), str(error.get("message") or "stream error"))

    def finish(self) -> Ending:
        """The finish skeleton once the body has ended."""
        if not self._stopped:
            raise ProviderError("network", "the Anthropic stream ended before message_stop")
        return Ending(
            [],
            Response(
                id=self._id,
                model=self._model,
                finish_reason=finish_reason(self._stop, self._stop_sequence),
                usage=usage(self._usage, "".join(self._thinking)),
            ),
        )


_HANDLERS = {
    "message_start": AnthropicStream._message_start,
    "content_block_start": AnthropicStream._block_start,
    "content_block_delta": AnthropicStream._block_delta,
    "content_block_stop": AnthropicStream._block_stop,
    "message_delta": AnthropicStream._message_delta,
    "message_stop": AnthropicStream._message_stop,
    "ping": AnthropicStream._ping,
    "error": AnthropicStream._error,
}
