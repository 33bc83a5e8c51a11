"""The mock's chunks -> canonical events: a pure state machine, like every provider's."""

from __future__ import annotations

import msgspec

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
from .._sse import excerpt
from ..errors import invalid_response
from . import wire
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

    def feed(self, data: bytes, event: str = "message") -> list[Event]:
        try:
            chunk = wire.decoder.decode(data)
        except msgspec.DecodeError:
            raise invalid_response(f"the mock sent a chunk it does not know: {excerpt(data)!r}") from None
        out: list[Event] = []
        match chunk:
            case wire.Text(text=text):
                if self._kind != "text":
                    out += self._open("text")
                    out.append(TextStart(index=self._index))
                self._buf.append(text)
                out.append(TextDelta(index=self._index, text=text))
            case wire.Reasoning(text=text):
                if self._kind != "reasoning":
                    out += self._open("reasoning")
                    out.append(ReasoningStart(index=self._index))
                self._buf.append(text)
                out.append(ReasoningDelta(index=self._index, text=text))
            case wire.ToolArgs(json=fragment):
                self._buf.append(fragment)
                out.append(ToolCallDelta(index=self._index, partial_json=fragment))
            case wire.Start(model=model):
                self._model = model
                out.append(StreamStart(model=model))
            case wire.Signature(signature=signature):
                if self._kind != "reasoning":
                    out += self._open("reasoning")
                    out.append(ReasoningStart(index=self._index))
                self._signature = signature
            case wire.Redacted(data=redacted):
                out += self._open("redacted")
                out.append(ReasoningStart(index=self._index))
                out.append(ReasoningEnd(index=self._index, redacted_data=redacted))
                self._kind = None
            case wire.ToolStart(id=call_id, name=name):
                out += self._open("tool")
                self._tool = (call_id, name)
                out.append(ToolCallStart(index=self._index, provider_id=call_id, name=name))
            case wire.ToolEnd():
                out += self._close()
            case wire.Usage():
                self._usage = usage(chunk)
            case wire.Finish(reason=reason):
                self._finish = finish_reason(reason)
            case wire.ProviderEvent(data=payload):
                if self.passthrough:
                    out.append(ProviderEvent(provider="mock", event_type="event", data=payload))
        return out

    def finish(self) -> Ending:
        """Close what is open; the response skeleton (reason, usage, model)."""
        return Ending(self._close(), Response(model=self._model, finish_reason=self._finish, usage=self._usage))
