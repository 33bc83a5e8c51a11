"""The mock's chunks -> canonical events: a pure state machine, like every provider's."""

from __future__ import annotations

from typing import Any

from ...protocol.accumulate import parse_arguments
from ...protocol.messages import (
    Event,
    FinishReason,
    ProviderEvent,
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
from .response import finish_reason, usage


class MockStream:
    def __init__(self, passthrough: bool = False) -> None:
        self.passthrough = passthrough
        self._index = -1
        self._kind: str | None = None  # kind of the open part
        self._buf: list[str] = []
        self._signature: str | None = None
        self._tool: tuple[str, str] | None = None
        self._model = ""
        self._usage = Usage()
        self._finish = FinishReason(reason="stop", raw="stop")

    def _close(self) -> list[Event]:
        kind, text = self._kind, "".join(self._buf)
        self._kind, self._buf = None, []
        if kind == "text":
            return [TextEnd(index=self._index, text=text)]
        if kind == "reasoning":
            signature, self._signature = self._signature, None
            return [ReasoningEnd(index=self._index, text=text, signature=signature)]
        if kind == "tool" and self._tool is not None:
            call_id, name = self._tool
            self._tool = None
            args = parse_arguments(text)
            return [
                ToolCallEnd(
                    index=self._index,
                    provider_id=call_id,
                    name=name,
                    arguments=args if args is not None or text.strip() else {},
                    raw_arguments=text,
                )
            ]
        return []

    def _open(self, kind: str) -> list[Event]:
        out = self._close()
        self._index += 1
        self._kind = kind
        return out

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        kind = chunk["kind"]
        out: list[Event] = []
        if kind == "start":
            self._model = chunk.get("model", "")
            out.append(StreamStart(model=self._model))
        elif kind == "text":
            if self._kind != "text":
                out += self._open("text")
                out.append(TextStart(index=self._index))
            self._buf.append(chunk["text"])
            out.append(TextDelta(index=self._index, text=chunk["text"]))
        elif kind == "reasoning":
            if self._kind != "reasoning":
                out += self._open("reasoning")
                out.append(ReasoningStart(index=self._index))
            self._buf.append(chunk["text"])
            out.append(ReasoningDelta(index=self._index, text=chunk["text"]))
        elif kind == "signature":
            if self._kind != "reasoning":
                out += self._open("reasoning")
                out.append(ReasoningStart(index=self._index))
            self._signature = chunk["signature"]
        elif kind == "redacted":
            out += self._open("redacted")
            out.append(ReasoningStart(index=self._index))
            out.append(ReasoningEnd(index=self._index, redacted_data=chunk["data"]))
            self._kind = None
        elif kind == "tool_start":
            out += self._open("tool")
            self._tool = (chunk["id"], chunk["name"])
            out.append(ToolCallStart(index=self._index, provider_id=chunk["id"], name=chunk["name"]))
        elif kind == "tool_args":
            self._buf.append(chunk["json"])
            out.append(ToolCallDelta(index=self._index, partial_json=chunk["json"]))
        elif kind == "tool_end":
            out += self._close()
        elif kind == "usage":
            self._usage = usage(chunk)
        elif kind == "finish":
            self._finish = finish_reason(chunk["reason"])
        elif kind == "event" and self.passthrough:
            out.append(ProviderEvent(provider="mock", event_type="event", data=chunk["data"]))
        return out

    def finish(self) -> Ending:
        """Close what is open; the response skeleton (reason, usage, model)."""
        return Ending(self._close(), Response(model=self._model, finish_reason=self._finish, usage=self._usage))
