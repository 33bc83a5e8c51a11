"""A whole response told as the events of a stream.

A server may answer a streamed request with one JSON body (a compatible server
that ignores `stream: true`). When the client asked for a stream, the parsed
response is replayed through the emitter as the events a stream of it would
have carried, so the client sees the same stream either way and the final
response is built, as always, from exactly what was sent.
"""

from __future__ import annotations

import json

from ..protocol.messages import (
    Event,
    ProviderPart,
    ProviderPartEvent,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    RedactedThinkingPart,
    Response,
    StreamStart,
    TextDelta,
    TextEnd,
    TextPart,
    TextStart,
    ThinkingPart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallPart,
    ToolCallStart,
)


def events_of(response: Response) -> list[Event]:
    """The events of `response`'s content, in order, one part per index."""
    out: list[Event] = [StreamStart(model=response.model)]
    for index, part in enumerate(response.message.content):
        t = type(part)
        if t is TextPart:
            out.append(TextStart(index=index))
            if part.text:  # type: ignore[union-attr]
                out.append(TextDelta(index=index, text=part.text))  # type: ignore[union-attr]
            out.append(TextEnd(index=index, text=part.text))  # type: ignore[union-attr]
        elif t is ThinkingPart:
            out.append(ReasoningStart(index=index))
            if part.text:  # type: ignore[union-attr]
                out.append(ReasoningDelta(index=index, text=part.text))  # type: ignore[union-attr]
            out.append(ReasoningEnd(index=index, text=part.text, signature=part.signature))  # type: ignore[union-attr]
        elif t is RedactedThinkingPart:
            redacted = part.data  # type: ignore[union-attr]
            out += [ReasoningStart(index=index), ReasoningEnd(index=index, redacted_data=redacted)]
        elif t is ToolCallPart:
            call: ToolCallPart = part  # type: ignore[assignment]
            raw = call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments or {})
            out.append(ToolCallStart(index=index, name=call.name, provider_id=call.provider_id))
            if raw:
                out.append(ToolCallDelta(index=index, partial_json=raw))
            out.append(
                ToolCallEnd(
                    index=index,
                    name=call.name,
                    provider_id=call.provider_id,
                    arguments=call.arguments,
                    raw_arguments=raw,
                )
            )
        elif t is ProviderPart:
            kept: ProviderPart = part  # type: ignore[assignment]
            out.append(ProviderPartEvent(index=index, api=kept.api, kind=kept.kind, data=kept.data, model=kept.model))
    return out


def skeleton_of(response: Response) -> Response:
    """What a stream's translator returns at its end: everything but the message, which
    the emitter builds from the events it sent."""
    response.message.content = []
    return response
