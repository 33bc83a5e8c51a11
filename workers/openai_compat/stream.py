"""Chat Completions SSE chunks -> canonical events: a pure state machine.

Tool calls are assembled by `index` (several in parallel; fragments may come
before the id or the name, so a call starts once its name is known);
`partial_json` is passed on verbatim. A first chunk with empty `choices`, a
usage chunk with empty `choices`, chunks after it, and `data: [DONE]` are all
expected. `reasoning_content` / `reasoning` deltas become reasoning events.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ...protocol.messages import (
    Event,
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
from ..errors import ProviderError, invalid_response
from .errors import from_body
from .response import finish_reason, tool_arguments, usage


class _Call:
    __slots__ = ("chunks", "id", "index", "name", "pending", "started")

    def __init__(self) -> None:
        self.index = -1  # canonical part index, once started
        self.id: str | None = None
        self.name = ""
        self.chunks: list[str] = []
        self.started = False
        self.pending: list[str] = []  # fragments that came before the name


class ChatStream:
    def __init__(self, passthrough: bool = False, provider: str = "openai_compat") -> None:
        self.passthrough = passthrough
        self.provider = provider
        self._next_index = 0
        self._text: int | None = None  # index of the open text part
        self._text_chunks: list[str] = []
        self._reasoning: int | None = None
        self._reasoning_chunks: list[str] = []  # every reasoning part's, for the token estimate
        self._reasoning_from = 0  # where the open part's chunks begin
        self._calls: dict[int, _Call] = {}
        self._id = ""
        self._model = ""
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None  # the last usage reported, read at the end
        self._started = False
        self.done = False
        self.seen = False  # any `data:` at all

    def _open_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index

    def _close_reasoning(self) -> list[Event]:
        if self._reasoning is None:
            return []
        index, self._reasoning = self._reasoning, None
        return [ReasoningEnd(index=index, text="".join(self._reasoning_chunks[self._reasoning_from :]))]

    def feed(self, data: bytes, event: str = "message") -> list[Event]:
        self.seen = True
        if data[:1] != b"{" and data.strip() == b"[DONE]":
            self.done = True
            return []
        try:
            chunk = msgspec.json.decode(data)
        except msgspec.DecodeError:
            raise invalid_response(f"the server sent a chunk that is not JSON: {excerpt(data)!r}") from None
        if not isinstance(chunk, dict):
            raise invalid_response(f"the server sent a chunk that is not an object: {excerpt(data)!r}")
        if "error" in chunk and "choices" not in chunk:
            raise from_body(None, chunk)
        out: list[Event] = []
        if not self._started and chunk.get("model"):
            # id and model come from the first chunk that has them (Azure's first is blank).
            self._started = True
            self._id = chunk.get("id") or ""
            self._model = chunk.get("model") or ""
            out.append(StreamStart(model=self._model))
        reported = chunk.get("usage")
        if isinstance(reported, dict):
            self._usage = reported
        choices = chunk.get("choices")
        if not choices or not isinstance(choices, list):
            if self.passthrough and not isinstance(reported, dict):
                out.append(ProviderEvent(provider=self.provider, event_type="chunk", data=chunk))
            return out
        choice = choices[0]
        delta = choice.get("delta") or {}
        thinking = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thinking, str) and thinking:
            if self._reasoning is None:
                self._reasoning = self._open_index()
                self._reasoning_from = len(self._reasoning_chunks)
                out.append(ReasoningStart(index=self._reasoning))
            self._reasoning_chunks.append(thinking)
            out.append(ReasoningDelta(index=self._reasoning, text=thinking))
        text = delta.get("content")
        if isinstance(text, str) and text:
            out += self._close_reasoning()
            if self._text is None:
                self._text = self._open_index()
                out.append(TextStart(index=self._text))
            self._text_chunks.append(text)
            out.append(TextDelta(index=self._text, text=text))
        for fragment in delta.get("tool_calls") or []:
            out += self._tool_fragment(fragment)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]
        return out

    def _tool_fragment(self, fragment: dict[str, Any]) -> list[Event]:
        out = self._close_reasoning()
        position = fragment.get("index", len(self._calls))
        call = self._calls.get(position)
        if call is None:
            call = self._calls[position] = _Call()
        if fragment.get("id"):
            call.id = fragment["id"]
        function = fragment.get("function") or {}
        if function.get("name"):
            call.name += function["name"] if not call.started else ""
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send an object, not a string
            arguments = json.dumps(arguments)
        if not call.started and call.name:
            call.started = True
            call.index = self._open_index()
            out.append(ToolCallStart(index=call.index, provider_id=call.id, name=call.name))
            for held in call.pending:
                out.append(ToolCallDelta(index=call.index, partial_json=held))
            call.pending = []
        if isinstance(arguments, str) and arguments:
            call.chunks.append(arguments)
            if call.started:
                out.append(ToolCallDelta(index=call.index, partial_json=arguments))
            else:
                call.pending.append(arguments)
        return out

    def generated(self) -> str:
        """Everything the model produced, for a usage estimate when none was reported."""
        return (
            "".join(self._reasoning_chunks)
            + "".join(self._text_chunks)
            + "".join(c.name + "".join(c.chunks) for c in self._calls.values())
        )

    def finish(self) -> Ending:
        """Close every open part; the finish skeleton, and whether usage was reported.
        A stream that ended with neither `[DONE]` nor a `finish_reason` was cut short."""
        if not self.done and self._finish is None:
            raise ProviderError(
                "network",
                f"the {self.provider} stream ended before its end "
                "(no `[DONE]` and no finish_reason): the answer is incomplete",
            )
        reason = finish_reason(self._finish)
        degraded = reason.reason == "error"
        out = self._close_reasoning()
        if self._text is not None:
            out.append(TextEnd(index=self._text, text="".join(self._text_chunks)))
            self._text = None
        for call in self._calls.values():
            if not call.started:  # a call whose name never came
                call.started = True
                call.index = self._open_index()
                out.append(ToolCallStart(index=call.index, provider_id=call.id, name=call.name))
                out += [ToolCallDelta(index=call.index, partial_json=p) for p in call.pending]
            raw = "".join(call.chunks)
            out.append(
                ToolCallEnd(
                    index=call.index,
                    provider_id=call.id,
                    name=call.name,
                    arguments=tool_arguments(raw, call.name, degraded),
                    raw_arguments=raw,
                )
            )
        reported = usage(self._usage, "".join(self._reasoning_chunks))
        return Ending(
            out,
            Response(id=self._id, model=self._model, finish_reason=reason, usage=reported or Usage()),
            reported is not None,
            self.generated(),
        )
