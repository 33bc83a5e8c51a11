"""Turns one job's canonical events into framed, numbered event messages.

The emitter is where the stream invariants are kept for every provider: it
stamps `request_id` and a gap-free `seq`, puts `stream_start` first, gives
tool calls their canonical ids, closes whatever is still open before the one
terminal event, and builds the final `Response` from exactly the deltas it
sent, so the deltas always concatenate to the final text.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..config.catalog import compute_cost
from ..protocol import trace
from ..protocol.accumulate import StreamAccumulator
from ..protocol.codec import SEPARATOR, encode, frame_event
from ..protocol.messages import (
    ContentPart,
    ErrorEvent,
    ErrorInfo,
    Event,
    Finish,
    FinishReason,
    FinishReasonName,
    Job,
    Message,
    ProviderPart,
    RateLimit,
    RedactedThinkingPart,
    Response,
    StreamStart,
    ThinkingPart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallPart,
    ToolCallStart,
    Usage,
    WarningInfo,
)
from ..protocol.tokens import estimate_content_tokens, estimate_request_tokens
from ..protocol.tool_arguments import argument_errors

#: Receives (request_id, frames, last_seq, terminal) for the link to the supervisor.
Sink = Callable[[str, list[bytes], int, bool], None]


def invalid_arguments(call: ToolCallPart) -> WarningInfo:
    """The warning on a response with a tool call whose arguments are not a JSON object."""
    raw = call.raw_arguments or ""
    return WarningInfo(
        code="tool_arguments_invalid",
        message=(
            f"the arguments of tool call {call.name!r} ({call.id}) are not a JSON object, so `arguments` is null and "
            f"`raw_arguments` keeps the text: {raw[:200]!r}; answer the call with an error result (is_error) and "
            "the model can try again"
        ),
    )


def arguments_off_schema(call: ToolCallPart, problems: str) -> WarningInfo:
    """The warning on a response with a tool call whose arguments break its tool's schema."""
    return WarningInfo(
        code="tool_arguments_invalid",
        message=(
            f"the arguments of tool call {call.name!r} ({call.id}) do not fit the tool's parameters schema: "
            f"{problems[:500]}; answer the call with an error result (is_error) naming this and the model can "
            "try again"
        ),
    )


class Emitter:
    def __init__(
        self,
        job: Job,
        provider: str,
        sink: Sink,
        canonical_id: Callable[[str], str],
        started_at: float | None = None,
        max_event_bytes: int = 0,
    ) -> None:
        self.job = job
        #: Largest frame sent (0: no limit); see `_refuse`.
        self.max_event_bytes = max_event_bytes
        self.provider = provider
        self._sink = sink
        self._canonical_id = canonical_id
        self._topic = job.client_id
        # Every frame of the job starts with its topic: encoded once, not per event.
        self._prefix = job.client_id.encode() + SEPARATOR
        self._seq = 0
        self._ids: dict[int, tuple[str, str | None]] = {}  # index -> (canonical id, provider id)
        self.acc = StreamAccumulator(provider)
        self.warnings: list[WarningInfo] = []
        self.rate_limit: RateLimit | None = None
        self.started_at = time.monotonic() if started_at is None else started_at
        self.terminal = False
        #: When the terminal event was framed, before its push sent it (TRUNKLINE_TRACE_HOPS only).
        self.terminal_ns = 0
        self._start: StreamStart | None = None
        #: The service tier the request's provider options ask for (it multiplies the price);
        #: the runtime sets it from the options it decodes once per job.
        self.service_tier: str | None = None

    @property
    def started(self) -> bool:
        """True once anything has gone to the client: from then on, no retry."""
        return self._seq > 0

    # -- events from the adapter -------------------------------------------------

    def emit(self, ev: Event) -> None:
        # `type(ev) is` rather than isinstance, here and in `_send`: events are msgspec
        # Structs, whose metaclass makes every isinstance that does not match cost four
        # times a type check, and this runs for every event.
        if self.terminal:
            return
        if type(ev) is StreamStart:
            # Held back until content follows: an error between a provider's "message
            # start" and its first content can still be retried, as nothing went out.
            if not self.started:
                self._start = ev
            return
        if not self.started:
            self._send_start()
        if type(ev) is ToolCallStart:
            provider_id = ev.provider_id or ev.id or ""
            canonical = self._canonical_id(provider_id)
            self._ids[ev.index] = (canonical, provider_id or None)
            ev.id = canonical
            ev.provider_id = provider_id or None
        elif type(ev) is ToolCallDelta:
            known = self._ids.get(ev.index)
            if known is not None:
                ev.id = known[0]
        elif type(ev) is ToolCallEnd:
            known = self._ids.get(ev.index)
            if known is not None:
                ev.id, ev.provider_id = known
        self._send(ev)

    def _send_start(self) -> None:
        start = self._start or StreamStart()
        start.provider = self.provider
        start.model = start.model or self.job.model.wire_name
        start.warnings = self.warnings + [w for w in start.warnings if w not in self.warnings]
        start.deployment = self.job.deployment
        self._send(start)

    def _send(self, ev: Event) -> None:
        ev.request_id = self.job.request_id
        ev.seq = self._seq
        frame = self._prefix + encode(ev)
        if self.max_event_bytes and len(frame) > self.max_event_bytes:
            self._refuse(ev, len(frame))
            return
        self._seq += 1
        self.acc.feed(ev)
        terminal = type(ev) is Finish or type(ev) is ErrorEvent
        if terminal and trace.ENABLED:
            self.terminal_ns = trace.now_ns()  # the push may send it at once: stamped before
        self._sink(self.job.request_id, [frame], ev.seq, terminal)
        if terminal:
            self.terminal = True

    def _refuse(self, ev: Event, size: int) -> None:
        """An event larger than any client is told to accept is never sent (a subscriber
        would drop it, and the request would look lost). A finish first loses its raw
        body (with a warning); if that is not enough, or for any other event, the
        request ends with an `invalid_response` error that says so, carrying the usage
        and cost (the provider billed them, and that must not be lost) and the content
        when it fits."""
        limit = self.max_event_bytes
        if isinstance(ev, Finish) and ev.response.raw is not None:
            ev.response.raw = None
            ev.response.warnings.append(
                WarningInfo(
                    code="raw_dropped",
                    message=f"the provider's raw body was left out: with it the response was "
                    f"{size} bytes, more than the daemon's largest event ({limit} bytes)",
                )
            )
            self._send(ev)
            return
        message = (
            f"an event of {size} bytes is larger than the daemon's largest event ({limit} bytes, "
            "from limits.max_response_bytes); it was not sent"
        )
        self.max_event_bytes = 0  # what follows must go out, whatever its size
        if isinstance(ev, Finish):
            billed = ev.response
        elif isinstance(ev, ErrorEvent) and ev.partial is not None:
            billed = ev.partial
            message = f"{ev.error.message}; and {message}"
        else:
            if self.job.stream and self.started:
                self._close_open_parts()
            billed = self.partial("error")
        error = ErrorEvent(
            error=ErrorInfo(error_class="invalid_response", message=message, retryable=False, provider=self.provider),
            partial=billed,
        )
        error.request_id = self.job.request_id
        error.seq = self._seq
        if len(frame_event(self._topic, error)) > limit:
            billed.message = Message(role="assistant", content=[])
            billed.raw = None
        self._send(error)

    def _close_open_parts(self) -> None:
        for ev in self.acc.closing_events():
            self._send(ev)

    # -- endings ---------------------------------------------------------------

    def finalize(self, response: Response) -> Response:
        """Fill in what the runtime owns: ids, provider, usage totals, cost, latency, warnings."""
        response.provider = self.provider
        response.model = response.model or self.acc.model or self.job.model.wire_name
        response.id = response.id or self.job.request_id
        usage = response.usage
        if usage.total_tokens != usage.input_tokens + usage.output_tokens:
            usage.total_tokens = usage.input_tokens + usage.output_tokens
        response.cost_usd = compute_cost(usage, self.job.model.price, service_tier=self.service_tier)
        response.pricing_version = self.job.model.pricing_version if response.cost_usd is not None else None
        response.latency_ms = round((time.monotonic() - self.started_at) * 1000.0, 3)
        response.warnings = self.warnings + [w for w in response.warnings if w not in self.warnings]
        if response.rate_limit is None:
            response.rate_limit = self.rate_limit
        if self.job.deployment is not None:
            response.deployment = self.job.deployment
            response.fallbacks = list(self.job.fallbacks)
        schemas: dict[str, dict[str, Any]] | None = None
        for part in response.message.content:
            if isinstance(part, ToolCallPart):
                if not part.id:
                    part.id = self._canonical_id(part.provider_id or "")
                part.provider = self.provider
                warning: WarningInfo | None = None
                if part.arguments is None:
                    warning = invalid_arguments(part)
                else:
                    # Checked once per call, when the response is whole (never per delta),
                    # guarded: the schema is the caller's, the event loop every client's.
                    if schemas is None:
                        schemas = {t.name: t.parameters for t in self.job.request.tools}
                    schema = schemas.get(part.name)
                    problems = argument_errors(schema, part.arguments, guarded=True) if schema is not None else None
                    if problems is not None:
                        warning = arguments_off_schema(part, problems)
                if warning is not None and warning not in response.warnings:
                    response.warnings.append(warning)
            elif isinstance(part, (ThinkingPart, RedactedThinkingPart)):
                part.provider = self.provider
                # Some providers accept reasoning back only from the model that wrote it.
                part.model = part.model or response.model or None
            elif isinstance(part, ProviderPart):
                part.provider = self.provider
        return response

    def finish(self, skeleton: Response) -> None:
        """End a stream normally. `skeleton` carries finish reason, usage, id, model, raw;
        the message is what was streamed."""
        if self.terminal:
            return
        if not self.started:
            if self._start is None:
                self._start = StreamStart(model=skeleton.model)
            self._send_start()
        self._close_open_parts()
        skeleton.message = Message(role="assistant", content=self.acc.content())
        self._send(Finish(response=self.finalize(skeleton)))

    def complete(self, response: Response) -> None:
        """End a non-streaming job with the whole response as its only event."""
        if self.terminal:
            return
        self._send(Finish(response=self.finalize(response)))

    def partial(
        self, reason: FinishReasonName = "error", raw: str | None = None, content: list[ContentPart] | None = None
    ) -> Response:
        """The response so far (`content`: what a whole-response request gathered before
        it failed; else what was streamed). A stream cut short reports no usage of its
        own, yet was billed: its usage is estimated from the prompt and what arrived, and
        flagged `estimated`, so its cost is not silently zero."""
        if content is None:
            content = self.acc.content()
        prompt = estimate_request_tokens(self.job.request)
        output = estimate_content_tokens(content)
        resp = Response(
            model=self.acc.model,
            message=Message(role="assistant", content=content),
            finish_reason=FinishReason(reason=reason, raw=raw),
            usage=Usage(input_tokens=prompt, output_tokens=output, total_tokens=prompt + output).mark_estimated(
                "input_tokens", "output_tokens", "total_tokens"
            ),
        )
        return self.finalize(resp)

    def cancelled(self) -> None:
        """End with reason `cancelled` and the content that arrived."""
        if self.terminal:
            return
        if self.job.stream:
            if not self.started:
                self._send_start()
            self._close_open_parts()
        self._send(Finish(response=self.partial("cancelled")))

    def fail(self, error: ErrorInfo, gathered: list[ContentPart] | None = None) -> None:
        """End with a terminal error that carries the partial response (for a whole-response
        request, what its provider sent before the failure, if anything)."""
        if self.terminal:
            return
        if self.job.stream and self.started:
            self._close_open_parts()
        if self.started:
            partial: Response | None = self.partial("error")
        elif gathered:
            partial = self.partial("error", content=gathered)
        elif self.job.deployment is not None:
            # A route's request says which deployment failed and which were tried
            # before, even when nothing arrived (an empty partial: nothing was billed).
            partial = Response(
                provider=self.provider, deployment=self.job.deployment, fallbacks=list(self.job.fallbacks)
            )
        else:
            partial = None
        self._send(ErrorEvent(error=error, partial=partial))
