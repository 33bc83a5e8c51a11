"""Canonical stream events -> the Responses API's server-sent events. A state machine per stream.

The sequence is OpenAI's: `response.created` and `response.in_progress` first,
then per output item `output_item.added`, its content (`content_part.added`,
`output_text.delta`..., `output_text.done`, `content_part.done`; a reasoning
item's `reasoning_summary_part.added`, `reasoning_summary_text.delta`...,
`.done`, `reasoning_summary_part.done`; a call's
`function_call_arguments.delta`..., `.done`), then `output_item.done`; last
`response.completed` (or `response.incomplete`, or `response.failed` after an
`error` event), every event numbered by `sequence_number` from 0. An item is
done when the next one begins, and the final response holds the items exactly as
they were done (the SDK's stream helper checks both).

The items are those `openai_responses_output` makes of a whole message; a
reasoning item's sealed parts are rebuilt from the events as the worker's own
accumulator rebuilds them (provider and model from `stream_start`).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from ..protocol.messages import (
    ErrorInfo,
    Finish,
    ProviderPart,
    ProviderPartEvent,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    RedactedThinkingPart,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingPart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from . import openai_responses_carrier as carrier
from . import sse
from .errors import body_of
from .openai_responses_output import (
    Ids,
    call_item,
    ending,
    failure,
    is_phase_marker,
    message_item,
    output_text,
    phase_of,
    reasoning_item,
    response_object,
    usage,
)

_encode = msgspec.json.encode


def _delta_head(kind: str, **fields: Any) -> bytes:
    """A delta event up to its delta: only the text and the sequence number differ from one
    delta to the next, so each is written after this, not encoded again with it."""
    data = _encode({"type": kind, **fields})
    return b"event: " + kind.encode() + b"\ndata: " + data[:-1] + b',"delta":'


class _Message:
    __slots__ = ("chunks", "head", "id", "index")

    def __init__(self, id: str, index: int) -> None:
        self.id = id
        self.index = index  # output_index
        self.chunks: list[str] = []
        self.head = _delta_head(
            "response.output_text.delta", item_id=id, output_index=index, content_index=0, logprobs=[]
        )


class _Reasoning:
    __slots__ = ("id", "index", "open", "parts")

    def __init__(self, id: str, index: int) -> None:
        self.id = id
        self.index = index
        self.parts: list[carrier.Carried] = []
        self.open = 0  # reasoning parts begun and not ended


class _Summary:
    """One reasoning part: its item, its place among the item's parts, its summary index."""

    __slots__ = ("at", "head", "k", "reasoning")

    def __init__(self, reasoning: _Reasoning, at: int, k: int) -> None:
        self.reasoning = reasoning
        self.at = at
        self.k = k
        self.head = _delta_head(
            "response.reasoning_summary_text.delta", item_id=reasoning.id, output_index=reasoning.index, summary_index=k
        )


class _Call:
    __slots__ = ("call_id", "chunks", "head", "id", "index", "name")

    def __init__(self, id: str, index: int, call_id: str, name: str) -> None:
        self.id = id
        self.index = index
        self.call_id = call_id
        self.name = name
        self.chunks: list[str] = []
        self.head = _delta_head("response.function_call_arguments.delta", item_id=id, output_index=index)


class ResponsesStream:
    """One response's events (the app's `Streamer`).

    A message item is done when its text ends, a call when its arguments end; a
    reasoning item gathers the reasoning and opaque parts that follow one another
    and is done once something else begins (or the response ends) and its last
    reasoning part has ended. Parts may interleave (an OpenAI-compatible server
    streams calls while its text is still open): each item ends on its own."""

    def __init__(self, echo: dict[str, Any], model: str) -> None:
        self.echo = echo
        self.model = model
        self.ids = Ids()
        self.created_at = int(time.time())
        self.seq = 0
        self.output: list[dict[str, Any]] = []  # by output_index: each item as added, then as done
        self.began = False
        self.provider: str | None = None
        self.part_model: str | None = None
        self._phase: str | None = None  # of the next message item
        self._tail: _Reasoning | None = None  # the reasoning item the next reasoning part joins
        self._ending: list[_Reasoning] = []  # reasoning items left with parts still open
        # canonical part index -> its item
        self._texts: dict[int, _Message] = {}
        self._summaries: dict[int, _Summary] = {}
        self._calls: dict[int, _Call] = {}

    def _event(self, payload: dict[str, Any]) -> bytes:
        payload["sequence_number"] = self.seq
        self.seq += 1
        return sse.event(payload["type"], payload)

    def _delta(self, head: bytes, delta: str) -> bytes:
        seq = self.seq
        self.seq = seq + 1
        return b"".join((head, _encode(delta), b',"sequence_number":', str(seq).encode(), b"}\n\n"))

    # -- the app's Streamer ------------------------------------------------------------

    def events(self, event: StreamEvent) -> list[bytes]:
        out = [] if self.began else self._begin()
        # The deltas first: they are most of a stream.
        if isinstance(event, TextDelta):
            message = self._texts[event.index]
            message.chunks.append(event.text)
            out.append(self._delta(message.head, event.text))
        elif isinstance(event, ReasoningDelta):
            out.append(self._delta(self._summaries[event.index].head, event.text))
        elif isinstance(event, ToolCallDelta):
            call = self._calls[event.index]
            call.chunks.append(event.partial_json)
            out.append(self._delta(call.head, event.partial_json))
        elif isinstance(event, TextStart):
            out += self._text_start(event.index)
        elif isinstance(event, TextEnd):
            out += self._text_end(event)
        elif isinstance(event, ReasoningStart):
            out += self._reasoning_start(event.index)
        elif isinstance(event, ReasoningEnd):
            out += self._reasoning_end(event)
        elif isinstance(event, ToolCallStart):
            out += self._call_start(event)
        elif isinstance(event, ToolCallEnd):
            out += self._call_end(event)
        elif isinstance(event, ProviderPartEvent):
            out += self._provider_part(event)
        elif isinstance(event, StreamStart):
            self.provider = event.provider or None
            self.part_model = event.model or None
        elif isinstance(event, Finish):
            out += self._finish(event)
        return out

    def error(self, info: ErrorInfo, status: int) -> list[bytes]:
        """OpenAI's way: an `error` event (the SDK raises it), then `response.failed`."""
        out = [] if self.began else self._begin()
        out += self._close_all("incomplete")
        wire = body_of(info, "openai", status)["error"]
        out.append(self._event({**wire, "type": "error", "error": wire}))
        failed = self._response("failed", error=failure(info))
        out.append(self._event({"type": "response.failed", "response": failed}))
        return out

    def end(self) -> list[bytes]:
        return []  # the Responses API sends no [DONE]

    # -- the response ----------------------------------------------------------------

    def _response(
        self,
        status: str,
        usage: dict[str, Any] | None = None,
        incomplete: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        output = self.output if status != "in_progress" else []
        return response_object(
            self.echo, self.ids, self.created_at, self.model, status, output, usage, incomplete, error
        )

    def _begin(self) -> list[bytes]:
        self.began = True
        shell = self._response("in_progress")
        return [
            self._event({"type": "response.created", "response": shell}),
            self._event({"type": "response.in_progress", "response": shell}),
        ]

    def _finish(self, event: Finish) -> list[bytes]:
        response = event.response
        status, incomplete, error = ending(response.finish_reason)
        out = self._close_all("completed" if status == "completed" else "incomplete")
        final = self._response(status, usage(response.usage), incomplete, error)
        name = {"completed": "response.completed", "failed": "response.failed"}.get(status, "response.incomplete")
        out.append(self._event({"type": name, "response": final}))
        return out

    # -- items -----------------------------------------------------------------------

    def _add(self, item: dict[str, Any]) -> bytes:
        self.output.append(item)
        return self._event({"type": "response.output_item.added", "output_index": len(self.output) - 1, "item": item})

    def _done(self, index: int, item: dict[str, Any]) -> bytes:
        self.output[index] = item
        return self._event({"type": "response.output_item.done", "output_index": index, "item": item})

    def _leave_tail(self) -> list[bytes]:
        """Something other than reasoning begins: the reasoning item before it is done
        (once its open parts end, if any are open)."""
        tail, self._tail = self._tail, None
        if tail is None:
            return []
        if tail.open:
            self._ending.append(tail)
            return []
        return [self._done(tail.index, reasoning_item(tail.id, tail.parts))]

    def _close_all(self, status: str) -> list[bytes]:
        """The response ends: every item still open is done as it stands."""
        out = self._leave_tail()
        for reasoning in self._ending:
            out.append(self._done(reasoning.index, reasoning_item(reasoning.id, reasoning.parts, status)))
        self._ending.clear()
        for message in self._texts.values():
            out.append(self._done(message.index, message_item(message.id, "".join(message.chunks), None, status)))
        self._texts.clear()
        for call in self._calls.values():
            out.append(
                self._done(call.index, call_item(call.id, call.call_id, call.name, "".join(call.chunks), status))
            )
        self._calls.clear()
        return out

    # -- text ------------------------------------------------------------------------

    def _text_start(self, index: int) -> list[bytes]:
        out = self._leave_tail()
        message = self._texts[index] = _Message(self.ids.item("msg"), len(self.output))
        phase, self._phase = self._phase, None
        out.append(self._add(message_item(message.id, None, phase, "in_progress")))
        out.append(
            self._event(
                {
                    "type": "response.content_part.added",
                    "item_id": message.id,
                    "output_index": message.index,
                    "content_index": 0,
                    "part": output_text(""),
                }
            )
        )
        return out

    def _text_end(self, event: TextEnd) -> list[bytes]:
        message = self._texts.pop(event.index)
        where = {"item_id": message.id, "output_index": message.index, "content_index": 0}
        added = self.output[message.index]
        return [
            self._event({"type": "response.output_text.done", **where, "text": event.text, "logprobs": []}),
            self._event({"type": "response.content_part.done", **where, "part": output_text(event.text)}),
            self._done(message.index, message_item(message.id, event.text, added.get("phase"))),
        ]

    # -- reasoning and opaque parts --------------------------------------------------

    def _join_tail(self) -> tuple[_Reasoning, list[bytes]]:
        if self._tail is not None:
            return self._tail, []
        reasoning = self._tail = _Reasoning(self.ids.item("rs"), len(self.output))
        added = {"id": reasoning.id, "type": "reasoning", "status": "in_progress", "summary": []}
        return reasoning, [self._add(added)]

    def _reasoning_start(self, index: int) -> list[bytes]:
        reasoning, out = self._join_tail()
        k = len(carrier.summaries(reasoning.parts))
        reasoning.parts.append(ThinkingPart(text=""))  # in its place until it ends
        reasoning.open += 1
        self._summaries[index] = _Summary(reasoning, len(reasoning.parts) - 1, k)
        out.append(
            self._event(
                {
                    "type": "response.reasoning_summary_part.added",
                    "item_id": reasoning.id,
                    "output_index": reasoning.index,
                    "summary_index": k,
                    "part": {"type": "summary_text", "text": ""},
                }
            )
        )
        return out

    def _reasoning_end(self, event: ReasoningEnd) -> list[bytes]:
        summary = self._summaries.pop(event.index)
        reasoning, at, k = summary.reasoning, summary.at, summary.k
        reasoning.open -= 1
        text = ""
        if event.redacted_data is not None:
            reasoning.parts[at] = RedactedThinkingPart(
                data=event.redacted_data, provider=self.provider, model=self.part_model
            )
        else:
            text = event.text
            reasoning.parts[at] = ThinkingPart(
                text=text, signature=event.signature, provider=self.provider, model=self.part_model
            )
        where = {"item_id": reasoning.id, "output_index": reasoning.index, "summary_index": k}
        out = [
            self._event({"type": "response.reasoning_summary_text.done", **where, "text": text}),
            self._event(
                {
                    "type": "response.reasoning_summary_part.done",
                    **where,
                    "part": {"type": "summary_text", "text": text},
                }
            ),
        ]
        if not reasoning.open and reasoning in self._ending:
            self._ending.remove(reasoning)
            out.append(self._done(reasoning.index, reasoning_item(reasoning.id, reasoning.parts)))
        return out

    def _provider_part(self, event: ProviderPartEvent) -> list[bytes]:
        part = ProviderPart(api=event.api, kind=event.kind, data=event.data, model=event.model, provider=self.provider)
        if is_phase_marker(part):
            self._phase = phase_of(part)
            return self._leave_tail()
        reasoning, out = self._join_tail()
        reasoning.parts.append(part)
        return out

    # -- function calls ----------------------------------------------------------------

    def _call_start(self, event: ToolCallStart) -> list[bytes]:
        out = self._leave_tail()
        call = self._calls[event.index] = _Call(self.ids.item("fc"), len(self.output), event.id, event.name)
        out.append(self._add(call_item(call.id, call.call_id, call.name, "", "in_progress")))
        return out

    def _call_end(self, event: ToolCallEnd) -> list[bytes]:
        call = self._calls.pop(event.index)
        arguments = event.raw_arguments or "".join(call.chunks) or "{}"
        where = {"item_id": call.id, "output_index": call.index}
        return [
            self._event({"type": "response.function_call_arguments.done", **where, "arguments": arguments}),
            self._done(call.index, call_item(call.id, call.call_id, call.name, arguments)),
        ]
