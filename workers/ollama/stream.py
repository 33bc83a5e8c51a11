"""Ollama NDJSON lines -> canonical events: a pure state machine.

Each line is a whole JSON object: `message.content` and `message.thinking`
are deltas; tool calls arrive whole (start, one delta with the full JSON,
end); the line with `done: true` carries the reason and the token counts. A
server that buffers the whole answer into one object is read the same way.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...protocol.messages import (
    Event,
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
    Usage,
)
from .._contract import Ending
from ..errors import ProviderError, invalid_response
from .response import call_arguments, check_error, finish_reason, usage


class OllamaStream:
    def __init__(self) -> None:
        self._next = 0
        self._text: int | None = None
        self._text_chunks: list[str] = []
        self._reasoning: int | None = None
        self._reasoning_chunks: list[str] = []  # every reasoning part's, for the token estimate
        self._reasoning_from = 0  # where the open part's chunks begin
        self._calls = 0
        self._model = ""
        self._started = False
        self._done: dict[str, Any] | None = None
        self.generated: list[str] = []

    def _close_reasoning(self) -> list[Event]:
        if self._reasoning is None:
            return []
        index, self._reasoning = self._reasoning, None
        return [ReasoningEnd(index=index, text="".join(self._reasoning_chunks[self._reasoning_from :]))]

    def _close_text(self) -> list[Event]:
        if self._text is None:
            return []
        index, self._text = self._text, None
        text, self._text_chunks = "".join(self._text_chunks), []
        return [TextEnd(index=index, text=text)]

    def feed(self, data: bytes, event: str = "message") -> list[Event]:
        try:
            obj = msgspec.json.decode(data)
        except msgspec.DecodeError:
            raise invalid_response(f"Ollama sent a line that is not JSON: {data[:200]!r}") from None
        if not isinstance(obj, dict):
            raise invalid_response(f"Ollama sent a line that is not an object: {data[:200]!r}")
        check_error(obj)
        out: list[Event] = []
        if not self._started:
            self._started = True
            self._model = obj.get("model", "")
            out.append(StreamStart(model=self._model))
        message = obj.get("message") or {}
        thinking = message.get("thinking")
        if isinstance(thinking, str) and thinking:
            if self._reasoning is None:
                self._reasoning = self._next
                self._next += 1
                self._reasoning_from = len(self._reasoning_chunks)
                out.append(ReasoningStart(index=self._reasoning))
            self._reasoning_chunks.append(thinking)
            self.generated.append(thinking)
            out.append(ReasoningDelta(index=self._reasoning, text=thinking))
        content = message.get("content")
        if isinstance(content, str) and content:
            out += self._close_reasoning()
            if self._text is None:
                self._text = self._next
                self._next += 1
                out.append(TextStart(index=self._text))
            self._text_chunks.append(content)
            self.generated.append(content)
            out.append(TextDelta(index=self._text, text=content))
        for call in message.get("tool_calls") or []:
            out += self._close_reasoning() + self._close_text()
            function = call.get("function") or {}
            arguments, raw = call_arguments(function)
            index, self._next = self._next, self._next + 1
            name = function.get("name", "")
            self._calls += 1
            self.generated.append(name + raw)
            # Ollama gives no id (Ollama Cloud does): the runtime mints one when it is missing.
            provider_id = call.get("id") or None
            out += [
                ToolCallStart(index=index, name=name, provider_id=provider_id),
                ToolCallDelta(index=index, partial_json=raw),
                ToolCallEnd(index=index, name=name, provider_id=provider_id, arguments=arguments, raw_arguments=raw),
            ]
        if obj.get("done"):
            self._done = obj
        return out

    def finish(self) -> Ending:
        if self._done is None:
            raise ProviderError("network", "the Ollama stream ended before its final (done) line")
        out = self._close_reasoning() + self._close_text()
        reported = usage(self._done, "".join(self._reasoning_chunks))
        skeleton = Response(
            model=self._done.get("model", self._model),
            finish_reason=finish_reason(self._done.get("done_reason"), self._calls > 0),
            usage=reported or Usage(),
        )
        return Ending(out, skeleton, reported is not None, "".join(self.generated))
