"""A request's events on their way out, and its end.

The `EventRelay` publishes what workers relay on the event socket and keeps it in
the request's replay ring; it writes the events the supervisor sends itself when
it ends a request (a dead worker, a cancel its worker never confirmed, a bug met
while handling it), in the request's own sequence; and it records every end
(the log line, the Prometheus metrics, the OpenTelemetry span) before the
request table lets the request go. Worker slots and the daemon's housekeeping
call it; it calls nothing above it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..protocol import trace
from ..protocol.codec import BUS_TOPIC, batch_frames, decode_event, frame_event, split_frame
from ..protocol.messages import (
    RETRYABLE,
    AnyEvent,
    BusEvent,
    ErrorClass,
    ErrorEvent,
    ErrorInfo,
    Event,
    Finish,
    FinishReason,
    Message,
    Relay,
    Response,
)
from ..protocol.ratelog import RateLimitedLog
from .request_log import RequestLog
from .requests import RequestState, RequestTable, estimate_billing

if TYPE_CHECKING:
    from .admission.gate import Gate
    from .admission.routes import Routing
    from .metrics import DaemonMetrics
    from .telemetry import Telemetry

log = logging.getLogger("trunkline.supervisor")


class Publisher(Protocol):
    """The event socket (`protocol.nng.EventPublisher`)."""

    def publish(self, frame: bytes) -> None: ...

    def publish_many(self, messages: list[bytes]) -> None: ...


class _NotBound:
    """The publisher until the daemon has bound the event socket."""

    def publish(self, frame: bytes) -> None:
        raise RuntimeError("the event socket is not bound yet")

    def publish_many(self, messages: list[bytes]) -> None:
        raise RuntimeError("the event socket is not bound yet")


class EventRelay:
    def __init__(
        self, requests: RequestTable, *, metrics: DaemonMetrics | None = None, telemetry: Telemetry | None = None
    ) -> None:
        self.requests = requests
        self.metrics = metrics
        self.telemetry = telemetry
        #: The event socket, given by the daemon once it is bound.
        self.pub: Publisher = _NotBound()
        self.fault_log = RateLimitedLog(log)
        #: Each request's line, written by the daemon's housekeeping (see `request_log`).
        self.request_log = RequestLog(log)
        self._all_ended: trio.Event | None = None
        #: The routes, when any are configured (the daemon sets it): a routed request's
        #: failure may go on to another deployment, and its end settles admission.
        self.routing: Routing | None = None
        #: Admission (client keys, limits, budgets), when configured: settles what each
        #: admitted request held when it ends.
        self.gate: Gate | None = None
        #: Told of every request's end before the table lets it go (shared state: its
        #: result is stored for the daemons following it).
        self.on_end: Callable[[RequestState], None] | None = None
        #: Whether any client may be subscribed to the bus (the router says, from the
        #: clients' `watch_bus`): when none is, requests' bus events (two per request at
        #: least) are not published. Events without a request always are.
        self.bus_watched = True

    # -- publishing ----------------------------------------------------------------

    def publish(self, frame: bytes) -> None:
        self.pub.publish(frame)

    def bus(self, name: str, **fields: Any) -> None:
        event = BusEvent(name=name, **fields)
        if self.bus_watched or not event.request_id:
            self.publish(frame_event(BUS_TOPIC, event))
        if event.request_id and (self.metrics is not None or self.telemetry is not None):
            self._observe_bus(event)  # a request's own (a route's fallback): on its span

    def relay(self, msg: Relay) -> None:
        """Publish a worker's frames and keep them for replay; drop those of requests
        the supervisor already ended (cancelled by timeout, or a previous generation)."""
        if not msg.request_id:
            # A worker's bus events, each its own topic's message: all of requests (the
            # worker's own news, `worker.*`, is the supervisor's to publish).
            if self.bus_watched:
                self.pub.publish_many(msg.frames)
            if self.metrics is not None or self.telemetry is not None:
                for frame in msg.frames:
                    self._observe_bus(decode_event(split_frame(frame)[1]))
            return
        state = self.requests.active.get(msg.request_id)
        if state is None:
            return
        if (
            msg.terminal
            and state.route is not None
            and state.last_seq < 0
            and len(msg.frames) == 1
            and self.routing is not None
            and self.routing.fallback(state, msg)
        ):
            return  # failed before anything went out: the next deployment serves it
        if state.otel_chunks is not None:  # a stream's later chunk, for OpenTelemetry's metrics
            state.otel_chunks.arrived(trio.current_time())
        if not state.first_event and (self.metrics is not None or self.telemetry is not None):
            state.first_event = True
            if state.stream:
                waited = trio.current_time() - state.submitted_at
                if self.metrics is not None:
                    self.metrics.first_event(state, waited)
                if self.telemetry is not None:
                    self.telemetry.first_event(state, waited)
        if msg.terminal and state.trace is not None:
            state.trace["terminal_received"] = trace.now_ns()
        self.pub.publish_many(batch_frames(msg.frames))
        state.keep(msg.frames, self.requests.ring_bytes)
        state.last_seq = msg.last_seq
        if msg.terminal:
            if state.trace is not None:
                state.trace["terminal_published"] = trace.now_ns()
                self.bus("trace.supervisor", request_id=state.request_id, detail=trace.detail(state.trace))
            self._ended(state)

    def _observe_bus(self, event: AnyEvent) -> None:
        if not isinstance(event, BusEvent):
            return
        if self.metrics is not None:
            self.metrics.bus(event)
        if self.telemetry is not None and event.request_id:
            self.telemetry.bus(event, self.requests.active.get(event.request_id))

    # -- ends ------------------------------------------------------------------------

    def all_ended(self) -> trio.Event:
        """Set once no request runs (at once when none does): the daemon's drain waits on it."""
        if self._all_ended is None:
            self._all_ended = trio.Event()
        if not self.requests.active:
            self._all_ended.set()
        return self._all_ended

    def _ended(self, state: RequestState) -> None:
        now = trio.current_time()
        if state.route is not None and self.routing is not None:
            try:
                self.routing.ended(state)
            except Exception as exc:  # noqa: BLE001 - admission's bookkeeping must never keep a request open
                self.fault(state.request_id, "settling its route", exc)
        logging_it = self.request_log.enabled
        if logging_it or self.metrics is not None or self.telemetry is not None:
            try:
                outcome: str | bytes | None
                if self.metrics is None and self.telemetry is None:
                    # The line alone reads three fields of the terminal frame, when it is written.
                    summary = state.summary
                    outcome = summary.outcome() if summary is not None else (state.ring[-1] if state.ring else None)
                else:
                    terminal = _terminal(state)
                    outcome = _outcome(terminal)
                    if self.metrics is not None:
                        self.metrics.ended(state, terminal, now - state.submitted_at)
                    if self.telemetry is not None:
                        self.telemetry.ended(state, terminal, now - state.submitted_at)
                if logging_it:
                    self.request_log.note(
                        state.request_id, state.model, state.stream, outcome, (now - state.submitted_at) * 1000
                    )
            except Exception as exc:  # noqa: BLE001 - a log line or a metric must never keep a request open
                self.fault(state.request_id, "recording its end", exc)
        if state.admission is not None and self.gate is not None:
            try:
                self.gate.ended(state)
            except Exception as exc:  # noqa: BLE001 - a bad count must never keep a request open
                self.fault(state.request_id, "settling its limits and budget", exc)
        if self.on_end is not None:
            try:
                self.on_end(state)
            except Exception as exc:  # noqa: BLE001 - sharing a result must never keep a request open
                self.fault(state.request_id, "sharing its result", exc)
        self.requests.end(state, now)
        if self._all_ended is not None and not self.requests.active:
            self._all_ended.set()

    def _publish_own(self, state: RequestState, event: Event) -> None:
        event.request_id = state.request_id
        event.seq = state.last_seq + 1
        frame = frame_event(state.client_id, event)
        self.publish(frame)
        state.keep([frame], self.requests.ring_bytes)
        state.last_seq = event.seq

    def _end_here(self, state: RequestState, terminal: Callable[[Response | None], Event]) -> None:
        """End a request with the supervisor's own events, in its sequence: the end of
        every part the worker left open, then `terminal(partial response)`."""
        if state.ended:
            return
        try:
            partial = self._partial(state)
        except Exception as exc:  # noqa: BLE001 - the terminal event goes out whatever its partial
            self.fault(state.request_id, "gathering its partial response", exc)
            partial = None
        try:
            self._publish_own(state, terminal(partial))
        except Exception as exc:  # noqa: BLE001 - sent again without the partial, which may be what failed
            self.fault(state.request_id, "sending its terminal event", exc)
            if partial is not None:
                self._publish_own(state, terminal(None))
        self._ended(state)

    def _partial(self, state: RequestState) -> Response | None:
        """What a request the supervisor ends itself had received, with its parts closed
        and its bill estimated."""
        if not state.stream and state.progress is not None and state.progress.content:
            # A whole-response request: what its worker last reported having gathered.
            partial = Response(
                model=state.progress.model,
                provider=state.provider,
                message=Message(role="assistant", content=state.progress.content),
                finish_reason=FinishReason(reason="error"),
            )
        elif state.stream and state.last_seq >= 0:
            acc = state.accumulator()
            for ev in acc.closing_events():
                self._publish_own(state, ev)
                acc.feed(ev)
            partial = acc.response()
            partial.provider = state.provider
        else:
            return None
        try:
            estimate_billing(state, partial, trio.current_time())
        except Exception as exc:  # noqa: BLE001 - the content is worth more than the estimate
            self.fault(state.request_id, "estimating its bill", exc)
        return partial

    def fault(self, request_id: str | None, doing: str, exc: BaseException) -> None:
        """The last guard's log: a bug met while handling one request, in one line (at
        most a few a second, whatever the input), the traceback at debug level."""
        self.fault_log.note(
            f"request {request_id}: internal error while {doing}: {type(exc).__name__}: {str(exc)[:200]}"
        )
        log.debug("request %s: traceback", request_id, exc_info=exc)

    def contain(self, request_id: str, doing: str, exc: BaseException) -> None:
        """The last guard: an exception while handling one request fails that request
        alone (class `other`), and the daemon keeps serving every other."""
        self.fault(request_id, doing, exc)
        state = self.requests.active.get(request_id)
        if state is not None and not state.ended:
            self.fail_request(
                state, "other", f"the daemon failed while {doing} ({type(exc).__name__}); other requests are unaffected"
            )

    def fail_request(self, state: RequestState, error_class: ErrorClass, message: str) -> None:
        info = ErrorInfo(
            error_class=error_class, message=message, retryable=RETRYABLE[error_class], provider=state.provider
        )
        self._end_here(state, lambda partial: ErrorEvent(error=info, partial=partial))

    def finish_cancelled(self, state: RequestState, raw: str) -> None:
        def finish(partial: Response | None) -> Event:
            response = partial or Response(provider=state.provider)
            response.finish_reason = FinishReason(reason="cancelled", raw=raw)
            return Finish(response=response)

        self._end_here(state, finish)


def _terminal(state: RequestState) -> AnyEvent | None:
    """A request's terminal event, from its last frame (None if it cannot be read)."""
    if not state.ring:
        return None
    try:
        event: AnyEvent = decode_event(split_frame(state.ring[-1])[1])
    except Exception:  # noqa: BLE001 - a log line or a metric must never fail a request
        return None
    return event


def _outcome(event: AnyEvent | None) -> str:
    """How a request ended: the finish reason and tokens, or the error class."""
    match event:
        case Finish(response=response):
            usage = response.usage
            return f"{response.finish_reason.reason}, {usage.input_tokens} in / {usage.output_tokens} out"
        case ErrorEvent(error=error):
            return f"error {error.error_class}"
    return "ended"
