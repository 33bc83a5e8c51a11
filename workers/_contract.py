"""The one contract every provider folder keeps, and the pipeline that runs it.

A provider's `request.build` (one signature everywhere: `BuildRequest`) returns a
`Built`; its `stream` module holds a `StreamTranslator` (bytes of one provider
payload in, canonical events out, an `Ending` at the end of the body). `Pipeline`
does the rest the same way for every provider, the mock included: it cuts the
body into payloads (SSE events, NDJSON lines, Gemini's SSE-or-JSON-array, or the
mock's messages),
keeps the raw payloads when asked, hands each to the translator and its events
to the emitter, refuses a body that held no payload at all, and estimates the
usage a provider did not report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import msgspec

from ..protocol import provider_options
from ..protocol.messages import (
    ContentPart,
    Event,
    ModelInfo,
    Request,
    Response,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    Usage,
    WarningInfo,
)
from ..protocol.tokens import estimate_request_tokens, estimate_text_tokens
from ._adapter import Call, Emit
from ._sse import JsonArrayDecoder, NdjsonDecoder, RawEvent, SseDecoder
from .errors import ProviderError


@dataclass(slots=True)
class Built:
    """A provider request: the JSON body, the headers it needs beyond auth, the path
    (where it depends on the request), and what the translation had to warn about."""

    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    warnings: list[WarningInfo] = field(default_factory=list)
    path: str = ""


@dataclass(slots=True)
class Ending:
    """What a translator says once the body has ended: the events that close what is
    still open, the finish skeleton (finish reason, usage, id, model), and, when the
    provider reported no usage, the generated text to estimate it from."""

    events: list[Event]
    response: Response
    usage_reported: bool = True
    generated: str = ""


class BuildRequest(Protocol):
    """Every provider's `request.build`: the canonical request as the provider's own. Pure.

    `provider` is the instance name (provider parts and ids may be tied to it);
    `options` the request's provider options as the worker decoded them for this call
    (`protocol/provider_options.py`; None: decoded here, from the request); `wire_ids`
    the provider id of each tool call in the history (canonical id -> provider id);
    `stream` whether the provider is asked for a stream; `instance` the instance's
    configured `options`."""

    def __call__(
        self,
        request: Request,
        model: ModelInfo,
        *,
        provider: str = ...,
        options: Any = None,
        wire_ids: Mapping[str, str] | None = None,
        stream: bool = True,
        instance: Mapping[str, Any] | None = None,
    ) -> Built: ...


_S = TypeVar("_S", bound=msgspec.Struct)


def options_as(schema: type[_S], options: Any, request: Request, provider: str, provider_type: str) -> _S:
    """The provider options a `build` was given (the worker's, decoded once per call), or
    when it was called without them (a token count, a test) the request's, decoded here."""
    if isinstance(options, schema):
        return options
    key, raw = provider_options.entry(request.provider_options, provider, provider_type)
    try:
        return provider_options.decode(schema, raw, f"provider_options.{key}")
    except provider_options.OptionsError as exc:
        raise ProviderError("invalid_request", str(exc)) from None


class StreamTranslator(Protocol):
    """One provider's stream: a payload's bytes (and its SSE event type, where the
    format has one) in, canonical events out; pure, no I/O."""

    def feed(self, data: bytes, event: str = "message") -> list[Event]: ...

    def finish(self) -> Ending: ...


#: How a body is cut into payloads: SSE events, NDJSON lines, Gemini's SSE-or-JSON-array,
#: or `messages`, a transport that hands over one whole payload at a time (the mock's).
Framing = Literal["sse", "ndjson", "sse_or_json", "messages"]


class SseOrJsonDecoder:
    """Gemini's stream: SSE with `alt=sse`, else one JSON array (or one object); the
    first byte that is not blank decides."""

    __slots__ = ("_head", "_inner")

    def __init__(self) -> None:
        self._inner: SseDecoder | JsonArrayDecoder | None = None
        self._head = b""

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        if self._inner is None:
            self._head += chunk
            text = self._head.lstrip(b" \t\r\n\xef\xbb\xbf")
            if not text:
                return []
            self._inner = JsonArrayDecoder() if text[:1] in (b"[", b"{") else SseDecoder()
            chunk, self._head = self._head, b""
        return self._payloads(self._inner, False, chunk)

    def flush(self) -> list[tuple[str, bytes]]:
        return [] if self._inner is None else self._payloads(self._inner, True, b"")

    @staticmethod
    def _payloads(inner: SseDecoder | JsonArrayDecoder, end: bool, chunk: bytes) -> list[tuple[str, bytes]]:
        if isinstance(inner, SseDecoder):
            events = inner.flush_raw() if end else inner.feed_raw(chunk)
            return [(e, d) for e, d, _, _ in events if d.strip() and d.strip() != b"[DONE]"]
        objects = inner.flush() if end else inner.feed(chunk)
        return [("message", o) for o in objects]


class Pipeline:
    """Decode, translate, emit; with raw capture, the empty-body check and the usage
    estimate. One per attempt (`restart` for a body that continues another)."""

    __slots__ = ("_feed", "_flush", "emit", "framing", "payloads", "raw", "received", "translator")

    def __init__(self, translator: StreamTranslator, framing: Framing, emit: Emit, keep_raw: bool) -> None:
        self.translator = translator
        self.framing = framing
        self.emit = emit
        self.raw: list[Any] | None = [] if keep_raw else None
        self.received = 0  # body bytes
        self.payloads = 0
        self.restart()

    def restart(self) -> None:
        """A new body (a resumed stream, the next hop of a long decode): new framing state."""
        if self.framing == "sse":
            decoder = SseDecoder()
            self._feed: Callable[[bytes], list[RawEvent]] = decoder.feed_raw
            self._flush: Callable[[], list[RawEvent]] = decoder.flush_raw
        elif self.framing == "messages":
            self._feed = lambda message: [("message", message, None, None)]
            self._flush = list
        elif self.framing == "ndjson":
            lines = NdjsonDecoder()
            self._feed = lambda chunk: [("message", line, None, None) for line in lines.feed(chunk)]
            self._flush = lambda: [("message", line, None, None) for line in lines.flush()]
        else:
            mixed = SseOrJsonDecoder()
            self._feed = lambda chunk: [(e, d, None, None) for e, d in mixed.feed(chunk)]
            self._flush = lambda: [(e, d, None, None) for e, d in mixed.flush()]

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        self._take(self._feed(chunk))

    def flush(self) -> None:
        self._take(self._flush())

    def _take(self, payloads: list[RawEvent]) -> None:
        translate, emit, raw = self.translator.feed, self.emit, self.raw
        for event, data, _, _ in payloads:
            self.payloads += 1
            if raw is not None:
                text = data.decode("utf-8", "replace")
                # Named SSE events (Anthropic's, OpenAI Responses') keep their name.
                raw.append(text if event == "message" else {"event": event, "data": text})
            for out in translate(data, event):
                emit(out)

    def finish(self, call: Call, who: str) -> Response:
        """The end of the body: the empty-body check, the closing events, the skeleton
        (with estimated usage where none was reported, and the raw payloads)."""
        self.flush()
        if not self.payloads and self.received:
            what, unit = _FORMS[self.framing]
            raise ProviderError(
                "invalid_response",
                f"{who} answered with something that is not {what} ({self.received} bytes, no {unit})",
            )
        ending = self.translator.finish()
        for out in ending.events:
            self.emit(out)
        skeleton = ending.response
        if not ending.usage_reported:
            skeleton.usage = estimated_usage(call, ending.generated, who)
        skeleton.raw = self.raw
        return skeleton


_FORMS = {
    "sse": ("an event stream", "`data:` line"),
    "ndjson": ("a JSON-lines stream", "JSON line"),
    "messages": ("a stream of messages", "message"),
    "sse_or_json": ("a stream of JSON objects", "JSON object or `data:` line"),
}


def generated_text(content: list[ContentPart]) -> str:
    """What a model produced in `content`, for a usage estimate: its text, its reasoning,
    and its tool calls' names and arguments."""
    out: list[str] = []
    for part in content:
        if isinstance(part, (TextPart, ThinkingPart)):
            out.append(part.text)
        elif isinstance(part, ToolCallPart):
            out.append(part.name + (part.raw_arguments or ""))
    return "".join(out)


def estimated_usage(call: Call, generated: str, who: str) -> Usage:
    """Usage estimated from the prompt and the generated text, flagged `estimated`, with a
    warning: a provider that reports none still billed the call."""
    warning = WarningInfo(code="usage_estimated", message=f"{who} reported no usage; tokens are estimated")
    if warning not in call.warnings:
        call.warnings.append(warning)
    prompt, out = estimate_request_tokens(call.request), estimate_text_tokens(generated)
    return Usage(input_tokens=prompt, output_tokens=out, total_tokens=prompt + out).mark_estimated(
        "input_tokens", "output_tokens", "total_tokens"
    )
