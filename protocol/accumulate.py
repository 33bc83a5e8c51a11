"""Events in, the same `Response` that a non-streaming call returns out.

Used by clients (to rebuild a response from deltas), by workers (for the
partial response of a cancelled or failed stream) and by the supervisor (for
the partial response of a request whose worker died).
"""

from __future__ import annotations

import json
from typing import Any

from .messages import (
    ContentPart,
    ErrorEvent,
    ErrorInfo,
    Finish,
    Message,
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
    WarningInfo,
)


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """Tool arguments from their JSON text: `{}` for nothing, None when unparseable
    or not an object."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class _Open:
    __slots__ = ("chunks", "done", "id", "kind", "name", "provider_id")

    def __init__(self, kind: str, id: str = "", name: str = "", provider_id: str | None = None) -> None:
        self.kind = kind
        self.chunks: list[str] = []
        self.id = id
        self.name = name
        self.provider_id = provider_id
        self.done: ContentPart | None = None


class StreamAccumulator:
    """Feed every event of one request; `response()` gives the result.

    Once a `finish` arrives its response is authoritative. Before that (or after
    an `error`), `response()` is built from the deltas seen so far."""

    def __init__(self, provider: str = "") -> None:
        self.model = ""
        self.provider = provider
        self.warnings: list[WarningInfo] = []
        self.finished: Response | None = None
        self.error: ErrorInfo | None = None
        self.partial: Response | None = None
        self._parts: dict[int, _Open] = {}

    @property
    def done(self) -> bool:
        return self.finished is not None or self.error is not None

    def open_parts(self) -> list[tuple[int, str]]:
        """(index, kind) of parts started and not yet ended, in index order."""
        return sorted((i, p.kind) for i, p in self._parts.items() if p.done is None)

    def feed(self, ev: Any) -> None:
        t = type(ev)
        if t is TextDelta or t is ReasoningDelta:
            part = self._parts.get(ev.index)
            if part is None:
                part = self._parts[ev.index] = _Open("text" if t is TextDelta else "reasoning")
            part.chunks.append(ev.text)
        elif t is ToolCallDelta:
            part = self._parts.get(ev.index)
            if part is None:
                part = self._parts[ev.index] = _Open("tool_call", ev.id)
            part.chunks.append(ev.partial_json)
        elif t is TextStart:
            self._parts.setdefault(ev.index, _Open("text"))
        elif t is ReasoningStart:
            self._parts.setdefault(ev.index, _Open("reasoning"))
        elif t is ToolCallStart:
            self._parts[ev.index] = _Open("tool_call", ev.id, ev.name, ev.provider_id)
        elif t is TextEnd:
            part = self._parts.setdefault(ev.index, _Open("text"))
            part.done = TextPart(text=ev.text)
        elif t is ReasoningEnd:
            part = self._parts.setdefault(ev.index, _Open("reasoning"))
            if ev.redacted_data is not None:
                part.done = RedactedThinkingPart(data=ev.redacted_data, provider=self.provider or None)
            else:
                part.done = ThinkingPart(text=ev.text, signature=ev.signature, provider=self.provider or None)
        elif t is ToolCallEnd:
            part = self._parts.setdefault(ev.index, _Open("tool_call", ev.id, ev.name))
            part.done = ToolCallPart(
                id=ev.id,
                name=ev.name,
                arguments=ev.arguments,
                raw_arguments=ev.raw_arguments or None,
                provider_id=ev.provider_id,
                provider=self.provider or None,
            )
        elif t is ProviderPartEvent:
            part = self._parts[ev.index] = _Open("provider")
            part.done = ProviderPart(
                api=ev.api, kind=ev.kind, data=ev.data, model=ev.model, provider=self.provider or None
            )
        elif t is StreamStart:
            self.model = ev.model
            self.provider = ev.provider or self.provider
            self.warnings = list(ev.warnings)
        elif t is Finish:
            self.finished = ev.response
        elif t is ErrorEvent:
            self.error = ev.error
            self.partial = ev.partial

    def closing_events(self) -> list[Any]:
        """The end events for every part still open (a stream cut short by a cancel, an
        error or a dead worker must still end each part it started)."""
        out: list[Any] = []
        for index, part in sorted(self._parts.items()):
            if part.done is not None:
                continue
            raw = "".join(part.chunks)
            if part.kind == "text":
                out.append(TextEnd(index=index, text=raw))
            elif part.kind == "reasoning":
                out.append(ReasoningEnd(index=index, text=raw))
            else:
                args = parse_arguments(raw)
                out.append(
                    ToolCallEnd(
                        index=index,
                        id=part.id,
                        name=part.name,
                        arguments=args if args is not None else {},
                        raw_arguments=raw,
                        provider_id=part.provider_id,
                    )
                )
        return out

    def content(self) -> list[ContentPart]:
        """The content parts so far; unfinished parts are closed as they stand."""
        out: list[ContentPart] = []
        for _, part in sorted(self._parts.items()):
            if part.done is not None:
                out.append(part.done)
            elif part.kind == "text":
                out.append(TextPart(text="".join(part.chunks)))
            elif part.kind == "reasoning":
                out.append(ThinkingPart(text="".join(part.chunks), provider=self.provider or None))
            else:
                raw = "".join(part.chunks)
                args = parse_arguments(raw)
                out.append(
                    ToolCallPart(
                        id=part.id,
                        name=part.name,
                        arguments=args if args is not None else {},
                        raw_arguments=raw or None,
                        provider_id=part.provider_id,
                        provider=self.provider or None,
                    )
                )
        return out

    def response(self) -> Response:
        if self.finished is not None:
            return self.finished
        if self.partial is not None:
            return self.partial
        return Response(
            model=self.model,
            provider=self.provider,
            message=Message(role="assistant", content=self.content()),
            warnings=list(self.warnings),
        )
