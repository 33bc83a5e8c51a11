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
        match part:
            case TextPart(text=text):
                out.append(TextStart(index=index))
                if text:
                    out.append(TextDelta(index=index, text=text))
                out.append(TextEnd(index=index, text=text))
            case ThinkingPart(text=text, signature=signature):
                out.append(ReasoningStart(index=index))
                if text:
                    out.append(ReasoningDelta(index=index, text=text))
                out.append(ReasoningEnd(index=index, text=text, signature=signature))
            case RedactedThinkingPart(data=redacted):
                out += [ReasoningStart(index=index), ReasoningEnd(index=index, redacted_data=redacted)]
            case ToolCallPart():
                raw = part.raw_arguments if part.raw_arguments is not None else json.dumps(part.arguments or {})
                out.append(ToolCallStart(index=index, name=part.name, provider_id=part.provider_id))
                if raw:
                    out.append(ToolCallDelta(index=index, partial_json=raw))
                out.append(
                    ToolCallEnd(
                        index=index,
                        name=part.name,
                        provider_id=part.provider_id,
                        arguments=part.arguments,
                        raw_arguments=raw,
                    )
                )
            case ProviderPart():
                out.append(
                    ProviderPartEvent(index=index, api=part.api, kind=part.kind, data=part.data, model=part.model)
                )
    return out


def skeleton_of(response: Response) -> Response:
    """What a stream's translator returns at its end: everything but the message, which
    the emitter builds from the events it sent."""
    response.message.content = []
    return response
