"""Responses API server-sent events -> canonical events: a pure state machine.

What a naive translator gets wrong, and this one does not:
* no event is required first: `response.created`, `queued` or `in_progress`
  (a resumed background stream starts mid-way, with none of them);
* deltas are keyed by `item_id` (`fc_...`, `msg_...`); a function call's
  `call_id` (the id its result must answer) comes only on `output_item.added`,
  so the call starts there and its deltas are mapped through the item;
* the final argument text is repeated in `function_call_arguments.done` and
  `output_item.done`: it completes the call once, and fills in arguments no
  delta carried;
* a reasoning item may stream summaries (`reasoning_summary_part.*`,
  `reasoning_summary_text.delta`), raw reasoning (`reasoning_text.delta`) or
  nothing at all; each summary is one reasoning part, and the finished item is
  one opaque part after them, for the next turn;
* built-in tool items are opaque parts once done, never client tool calls;
* an `error` event inside a 200 stream ends it with that error (`response.failed`
  follows it, or stands alone); `obfuscation` padding is ignored; a gap in
  `sequence_number` means events were lost, which is an error, not a guess.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...protocol.messages import (
    Event,
    ModelInfo,
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
from .request import API
from .response import call_arguments, finish_reason, opaque, phase_marker, reasoning_texts, usage


class _Part:
    """One canonical part open in the stream."""

    __slots__ = ("chunks", "done", "index")

    def __init__(self, index: int) -> None:
        self.index = index
        self.chunks: list[str] = []
        self.done = False


class _Item:
    """One output item, by its `output_index`."""

    __slots__ = ("call", "call_id", "ended", "id", "kind", "name", "parts", "streamed")

    def __init__(self, kind: str, id: str, call_id: str = "", name: str = "") -> None:
        self.kind = kind
        self.id = id
        self.call_id = call_id
        self.name = name
        self.parts: dict[tuple[str, int], _Part] = {}  # (content | summary | reasoning, its index) -> part
        self.call: _Part | None = None
        self.ended = False
        self.streamed = False  # any content came as deltas


class ResponsesStream:
    def __init__(self, model: ModelInfo, passthrough: bool = False, provider: str = "openai") -> None:
        self.model = model
        self.passthrough = passthrough
        self.provider = provider
        self._next_index = 0
        self._items: dict[int, _Item] = {}
        self._by_id: dict[str, int] = {}
        self._id = ""
        self._model = ""
        self._started = False
        self._final: dict[str, Any] | None = None
        self._refused = False
        self._calls = 0
        self.last_sequence: int | None = None

    @property
    def response_id(self) -> str:
        return self._id

    @property
    def done(self) -> bool:
        return self._final is not None

    def _open(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index

    def feed(self, data: bytes, event: str = "message") -> list[Event]:
        try:
            payload = msgspec.json.decode(data)
        except msgspec.DecodeError:
            raise invalid_response(f"OpenAI sent an event that is not JSON: {excerpt(data)!r}") from None
        if not isinstance(payload, dict):
            raise invalid_response(f"OpenAI sent an event that is not an object: {excerpt(data)!r}")
        sequence = payload.get("sequence_number")
        if isinstance(sequence, int):
            if self.last_sequence is not None and sequence != self.last_sequence + 1:
                if sequence <= self.last_sequence:
                    return []  # a repeat (a resumed stream may overlap): already handled
                raise invalid_response(
                    f"OpenAI's stream skipped events: sequence_number {self.last_sequence} was followed by {sequence}"
                )
            self.last_sequence = sequence
        kind = str(payload.get("type") or event)
        handler = _HANDLERS.get(kind)
        if handler is None:
            if self.passthrough:
                return [ProviderEvent(provider=self.provider, event_type=kind, data=payload)]
            return []
        return handler(self, payload)

    # -- the response's own lifecycle ------------------------------------------------------

    def _lifecycle(self, p: dict[str, Any]) -> list[Event]:
        response = p.get("response") or {}
        if not self._id:
            self._id = response.get("id") or ""
        if response.get("model"):
            self._model = response["model"]
        if self._started:
            return []
        self._started = True
        return [StreamStart(model=self._model)]

    def _completed(self, p: dict[str, Any]) -> list[Event]:
        out = self._lifecycle(p)
        self._final = p.get("response") or {}
        # Items the stream announced but never finished are closed as they stand...
        for item in self._items.values():
            if not item.ended:
                out += self._end_item(item, None)
        # ...and items it never showed (a stream resumed after they were sent) come whole.
        for position, raw in enumerate(self._final.get("output") or []):
            if isinstance(raw, dict) and position not in self._items and raw.get("id") not in self._by_id:
                out += self._item_done({"item": raw, "output_index": position})
        return out

    def _failed(self, p: dict[str, Any]) -> list[Event]:
        response = p.get("response") or {}
        error = response.get("error")
        if not isinstance(error, dict) or not error:
            error = {"message": f"the response ended with status {response.get('status')}"}
        raise from_error_object(error)

    def _error(self, p: dict[str, Any]) -> list[Event]:
        error = p.get("error")
        raise from_error_object(error if isinstance(error, dict) else p)

    # -- output items -----------------------------------------------------------------------

    def _item_of(self, p: dict[str, Any]) -> _Item | None:
        position = self._by_id.get(p.get("item_id") or "")
        if position is None:
            position = p.get("output_index")
        return self._items.get(position) if isinstance(position, int) else None

    def _item_added(self, p: dict[str, Any]) -> list[Event]:
        raw = p.get("item") or {}
        position = p.get("output_index")
        if not isinstance(position, int):
            position = len(self._items)
        kind = str(raw.get("type") or "")
        item = _Item(kind, raw.get("id") or "", raw.get("call_id") or "", raw.get("name") or "")
        self._items[position] = item
        if item.id:
            self._by_id[item.id] = position
        out: list[Event] = []
        if kind == "message":
            marker = phase_marker(raw)
            if marker is not None:
                out.append(ProviderPartEvent(index=self._open(), api=API, kind=marker.kind, data=marker.data))
        elif kind == "function_call":
            self._calls += 1
            item.call = _Part(self._open())
            out.append(ToolCallStart(index=item.call.index, provider_id=item.call_id or None, name=item.name))
            if raw.get("arguments"):
                item.call.chunks.append(raw["arguments"])
                out.append(ToolCallDelta(index=item.call.index, partial_json=raw["arguments"]))
        elif self.passthrough and kind != "reasoning":
            out.append(ProviderEvent(provider=self.provider, event_type="response.output_item.added", data=p))
        return out

    def _item_done(self, p: dict[str, Any]) -> list[Event]:
        raw = p.get("item") or {}
        item = self._item_of({"item_id": raw.get("id"), "output_index": p.get("output_index")})
        if item is None:  # a `done` with no `added` (a resumed stream): take the whole item
            out = self._item_added({"item": {**raw, "arguments": ""}, "output_index": p.get("output_index")})
            item = self._item_of({"item_id": raw.get("id"), "output_index": p.get("output_index")})
            assert item is not None
            return out + self._end_item(item, raw)
        return self._end_item(item, raw)

    def _end_item(self, item: _Item, raw: dict[str, Any] | None) -> list[Event]:
        if item.ended:
            return []
        item.ended = True
        out: list[Event] = []
        if item.kind == "message":
            if raw is not None and not item.parts:
                # Nothing streamed: the finished item's own text.
                for block in raw.get("content") or []:
                    text = block.get("text") if block.get("type") == "output_text" else block.get("refusal")
                    if block.get("type") == "refusal":
                        self._refused = True
                    if text:
                        index = self._open()
                        out += [
                            TextStart(index=index),
                            TextDelta(index=index, text=text),
                            TextEnd(index=index, text=text),
                        ]
            for part in item.parts.values():
                out += self._close_text(part)
            return out
        if item.kind == "reasoning":
            for part in item.parts.values():
                out += self._close_reasoning(part)
            if raw is not None:
                if not item.parts:
                    for text in reasoning_texts(raw):
                        index = self._open()
                        out += [
                            ReasoningStart(index=index),
                            ReasoningDelta(index=index, text=text),
                            ReasoningEnd(index=index, text=text),
                        ]
                kept = opaque(raw, self.model)
                out.append(
                    ProviderPartEvent(index=self._open(), api=API, kind=kept.kind, data=kept.data, model=kept.model)
                )
            return out
        if item.kind == "function_call":
            return self._close_call(item, (raw or {}).get("arguments"))
        if raw is not None:
            out.append(ProviderPartEvent(index=self._open(), api=API, kind=item.kind, data=raw))
        return out

    # -- text and refusals ------------------------------------------------------------------

    def _text_part(self, item: _Item, key: tuple[str, int]) -> tuple[_Part, list[Event]]:
        part = item.parts.get(key)
        if part is not None:
            return part, []
        part = item.parts[key] = _Part(self._open())
        return part, [TextStart(index=part.index)]

    def _content_added(self, p: dict[str, Any]) -> list[Event]:
        item = self._item_of(p)
        if item is None or item.kind != "message":
            return []
        if (p.get("part") or {}).get("type") == "refusal":
            self._refused = True
        _, out = self._text_part(item, ("content", int(p.get("content_index") or 0)))
        return out

    def _text_delta(self, p: dict[str, Any]) -> list[Event]:
        item = self._item_of(p)
        if item is None:
            raise invalid_response(f"OpenAI sent text for item {p.get('item_id')!r}, which never started")
        if p.get("type") == "response.refusal.delta":
            self._refused = True
        text = p.get("delta") or ""
        part, out = self._text_part(item, ("content", int(p.get("content_index") or 0)))
        if text and not part.done:
            part.chunks.append(text)
            out.append(TextDelta(index=part.index, text=text))
        return out

    def _text_done(self, p: dict[str, Any]) -> list[Event]:
        item = self._item_of(p)
        if item is None:
            return []
        part = item.parts.get(("content", int(p.get("content_index") or 0)))
        if part is None:
            return []
        final = p.get("text") if p.get("type") == "response.output_text.done" else p.get("refusal")
        out: list[Event] = []
        if isinstance(final, str) and not part.chunks and final:
            part.chunks.append(final)
            out.append(TextDelta(index=part.index, text=final))
        return out + self._close_text(part)

    def _close_text(self, part: _Part) -> list[Event]:
        if part.done:
            return []
        part.done = True
        return [TextEnd(index=part.index, text="".join(part.chunks))]

    # -- reasoning ------------------------------------------------------------------------------

    def _reasoning_part(self, p: dict[str, Any], space: str, key_field: str) -> tuple[_Part | None, list[Event]]:
        item = self._item_of(p)
        if item is None or item.kind != "reasoning":
            return None, []
        key = (space, int(p.get(key_field) or 0))
        part = item.parts.get(key)
        if part is not None:
            return part, []
        part = item.parts[key] = _Part(self._open())
        return part, [ReasoningStart(index=part.index)]

    def _summary_added(self, p: dict[str, Any]) -> list[Event]:
        return self._reasoning_part(p, "summary", "summary_index")[1]

    def _summary_delta(self, p: dict[str, Any]) -> list[Event]:
        return self._reasoning_delta(p, "summary", "summary_index")

    def _reasoning_text_delta(self, p: dict[str, Any]) -> list[Event]:
        return self._reasoning_delta(p, "reasoning", "content_index")

    def _reasoning_delta(self, p: dict[str, Any], space: str, key_field: str) -> list[Event]:
        part, out = self._reasoning_part(p, space, key_field)
        text = p.get("delta") or ""
        if part is not None and text and not part.done:
            part.chunks.append(text)
            out.append(ReasoningDelta(index=part.index, text=text))
        return out

    def _summary_done(self, p: dict[str, Any]) -> list[Event]:
        part, out = self._reasoning_part(p, "summary", "summary_index")
        if part is None:
            return out
        text = ((p.get("part") or {}).get("text") if "part" in p else p.get("text")) or ""
        if text and not part.chunks:
            part.chunks.append(text)
            out.append(ReasoningDelta(index=part.index, text=text))
        return out + self._close_reasoning(part)

    def _close_reasoning(self, part: _Part) -> list[Event]:
        if part.done:
            return []
        part.done = True
        return [ReasoningEnd(index=part.index, text="".join(part.chunks))]

    # -- function calls ---------------------------------------------------------------------

    def _arguments_delta(self, p: dict[str, Any]) -> list[Event]:
        item = self._item_of(p)
        if item is None or item.call is None:
            raise invalid_response(f"OpenAI sent arguments for item {p.get('item_id')!r}, which never started")
        fragment = p.get("delta") or ""
        if not fragment or item.call.done:
            return []
        item.call.chunks.append(fragment)
        return [ToolCallDelta(index=item.call.index, partial_json=fragment)]

    def _arguments_done(self, p: dict[str, Any]) -> list[Event]:
        item = self._item_of(p)
        if item is None or item.call is None:
            return []
        return self._close_call(item, p.get("arguments"))

    def _close_call(self, item: _Item, final: Any) -> list[Event]:
        call = item.call
        if call is None or call.done:
            return []
        out: list[Event] = []
        if isinstance(final, str) and final and not call.chunks:
            call.chunks.append(final)
            out.append(ToolCallDelta(index=call.index, partial_json=final))
        call.done = True
        raw = "".join(call.chunks)
        out.append(
            ToolCallEnd(
                index=call.index,
                name=item.name,
                provider_id=item.call_id or None,
                arguments=call_arguments(raw, item.name),
                raw_arguments=raw,
            )
        )
        return out

    # -- the end ----------------------------------------------------------------------------

    def finish(self) -> Ending:
        """The finish skeleton once the body has ended."""
        if self._final is None:
            raise ProviderError("network", "the OpenAI stream ended before response.completed")
        final = self._final
        status = final.get("status") or "completed"
        return Ending(
            [],
            Response(
                id=final.get("id") or self._id,
                model=final.get("model") or self._model,
                finish_reason=finish_reason(status, final.get("incomplete_details"), self._calls > 0, self._refused),
                usage=usage(final.get("usage")),
            ),
        )


def _ignore(self: ResponsesStream, p: dict[str, Any]) -> list[Event]:
    return []


_HANDLERS = {
    "response.created": ResponsesStream._lifecycle,
    "response.queued": ResponsesStream._lifecycle,
    "response.in_progress": ResponsesStream._lifecycle,
    "response.completed": ResponsesStream._completed,
    "response.incomplete": ResponsesStream._completed,
    "response.failed": ResponsesStream._failed,
    "error": ResponsesStream._error,
    "response.output_item.added": ResponsesStream._item_added,
    "response.output_item.done": ResponsesStream._item_done,
    "response.content_part.added": ResponsesStream._content_added,
    "response.content_part.done": _ignore,
    "response.output_text.delta": ResponsesStream._text_delta,
    "response.output_text.done": ResponsesStream._text_done,
    "response.refusal.delta": ResponsesStream._text_delta,
    "response.refusal.done": ResponsesStream._text_done,
    "response.reasoning_summary_part.added": ResponsesStream._summary_added,
    "response.reasoning_summary_part.done": ResponsesStream._summary_done,
    "response.reasoning_summary_text.delta": ResponsesStream._summary_delta,
    "response.reasoning_summary_text.done": _ignore,
    "response.reasoning_text.delta": ResponsesStream._reasoning_text_delta,
    "response.reasoning_text.done": _ignore,
    "response.function_call_arguments.delta": ResponsesStream._arguments_delta,
    "response.function_call_arguments.done": ResponsesStream._arguments_done,
}
