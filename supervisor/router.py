"""The control socket: every request gets exactly one reply, and quickly.

Fast requests (submit, cancel, replay, probe, status...) are answered inline
by the receiving task; the two that need a worker's answer (`ready`,
`count_tokens`) get a task of their own so they never hold up a submit.
Nothing a client sends can crash this loop: unreadable input gets a
`protocol_error` reply.
"""

from __future__ import annotations

import hmac
import logging
import os
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..config.catalog import UnknownModel
from ..protocol import codec, trace
from ..protocol.codec import frame_event
from ..protocol.ids import ulid
from ..protocol.messages import (
    PROTOCOL_VERSION,
    RETRYABLE,
    Accepted,
    Cancel,
    CancelResult,
    CheckReady,
    CountTokens,
    ErrorClass,
    ErrorInfo,
    EstimateTokens,
    Goodbye,
    GoodbyeAck,
    Hello,
    Job,
    Limits,
    ListModels,
    ModelInfo,
    Models,
    Probe,
    ProbeEvent,
    ProbeSent,
    ProtocolError,
    Ready,
    ReadyResult,
    Rejected,
    Replay,
    ReplayResult,
    StatusQuery,
    StatusReport,
    Submit,
    TokenCount,
    Welcome,
)
from ..protocol.sp_wire import Oversize, split_url
from ..protocol.tokens import estimate_request_tokens
from .requests import RequestState
from .validate import Invalid, validate

if TYPE_CHECKING:
    from .daemon import Daemon

log = logging.getLogger("trunkline.supervisor")

#: Events per `replay` reply; a client asks again from where a reply ended.
REPLAY_BATCH = 5000
READY_TIMEOUT_S = 30.0
COUNT_TIMEOUT_S = 10.0


def _error(error_class: ErrorClass, message: str, **extra: Any) -> ErrorInfo:
    return ErrorInfo(error_class=error_class, message=message, retryable=RETRYABLE[error_class], **extra)


class Router:
    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon
        self.pipes: dict[int, set[str]] = {}  # control pipe -> client ids seen on it
        self.clients: dict[str, set[int]] = {}  # client id -> its live pipes
        self.max_bytes = daemon.config.limits.max_message_bytes
        self.token = os.environ.get("TRUNKLINE_TOKEN")
        # On a tcp control endpoint a connection must say hello with the token before
        # anything else; these are the connections that did.
        self.needs_token = split_url(daemon.control_url)[0] == "tcp"
        self.authenticated: set[int] = set()
        self.received_ns = 0  # when the request being handled arrived (TRUNKLINE_TRACE_HOPS)

    async def serve(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        await self.d.rep.serve(self.on_request)

    def on_request(self, data: bytes | Oversize, backtrace: bytes, conn_id: int) -> bytes | None:
        """One control request, answered before the next is read; None when the answer
        needs a worker (`ready`, `count_tokens`) and comes later."""
        if trace.ENABLED:
            self.received_ns = trace.now_ns()
        try:
            reply = self.handle(data, conn_id)
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop the daemon
            log.exception("control request failed")
            reply = ProtocolError(error=_error("other", f"internal error: {exc!r}"))
        if isinstance(reply, _Deferred):
            self._nursery.start_soon(self._answer_later, backtrace, conn_id, reply)
            return None
        return codec.encode(reply)

    async def _answer_later(self, backtrace: bytes, conn_id: int, deferred: _Deferred) -> None:
        try:
            reply = await deferred.run()
        except Exception as exc:  # noqa: BLE001
            log.exception("control request failed")
            reply = ProtocolError(error=_error("other", f"internal error: {exc!r}"))
        if not self.d.rep.reply(conn_id, backtrace, codec.encode(reply)):
            log.debug("reply not delivered: client connection %d has gone", conn_id)

    # -- dispatch --------------------------------------------------------------------

    def handle(self, data: bytes | Oversize, pipe_id: int) -> Any:
        size = data.size if type(data) is Oversize else len(data)  # type: ignore[union-attr]
        if size > self.max_bytes:
            return ProtocolError(error=_error(
                "invalid_request", f"message of {size} bytes exceeds the limit of {self.max_bytes} bytes"))
        try:
            msg = codec.decode_control_request(data)
        except codec.DecodeError as exc:
            return ProtocolError(error=_error("invalid_request", str(exc)))
        t = type(msg)
        if self.needs_token and t is not Hello and pipe_id not in self.authenticated:
            return ProtocolError(error=_error("authentication", "this endpoint needs a hello with a valid token first"))
        if t is Submit:
            return self.submit(msg, pipe_id)  # type: ignore[arg-type]
        if t is Cancel:
            return self.cancel(msg)  # type: ignore[arg-type]
        if t is Replay:
            return self.replay(msg)  # type: ignore[arg-type]
        if t is Probe:
            self._seen(msg.client_id, pipe_id)  # type: ignore[union-attr]
            self.d.publish(frame_event(msg.client_id, ProbeEvent(client_id=msg.client_id)))  # type: ignore[union-attr]
            return ProbeSent()
        if t is Hello:
            return self.hello(msg, pipe_id)  # type: ignore[arg-type]
        if t is ListModels:
            return Models(models=self.d.catalog.models(msg.provider))  # type: ignore[union-attr]
        if t is StatusQuery:
            return self.status()
        if t is Ready:
            return _Deferred(self.ready(msg))  # type: ignore[arg-type]
        if t is CountTokens:
            return _Deferred(self.count_tokens(msg))  # type: ignore[arg-type]
        if t is Goodbye:
            return GoodbyeAck(cancelled=self.client_gone(msg.client_id))  # type: ignore[union-attr]
        return ProtocolError(error=_error("invalid_request", f"unexpected message type {t.__name__}"))

    # -- clients -----------------------------------------------------------------------

    def _seen(self, client_id: str, pipe_id: int) -> None:
        pipes = self.clients.setdefault(client_id, set())
        if pipe_id not in pipes:
            pipes.add(pipe_id)
            self.pipes.setdefault(pipe_id, set()).add(client_id)

    def pipe_gone(self, pipe_id: int) -> None:
        """A control connection closed: a client whose last connection it was has
        gone away, and its unfinished requests are cancelled upstream."""
        self.authenticated.discard(pipe_id)
        for client_id in self.pipes.pop(pipe_id, set()):
            pipes = self.clients.get(client_id)
            if pipes is None:
                continue
            pipes.discard(pipe_id)
            if not pipes:
                del self.clients[client_id]
                n = self.client_gone(client_id)
                if n:
                    log.info("client %s went away; cancelled %d request(s)", client_id, n)

    def client_gone(self, client_id: str) -> int:
        n = 0
        for state in self.d.requests.of_client(client_id):
            self.d.cancel_request(state)
            n += 1
        return n

    def hello(self, msg: Hello, pipe_id: int) -> Any:
        if msg.protocol > PROTOCOL_VERSION:
            return ProtocolError(error=_error(
                "invalid_request", f"protocol {msg.protocol} is newer than this daemon's {PROTOCOL_VERSION}"))
        if self.needs_token:
            if not self.token or not msg.token or not hmac.compare_digest(msg.token.encode(), self.token.encode()):
                return ProtocolError(error=_error("authentication", "this endpoint needs a valid token in hello"))
            self.authenticated.add(pipe_id)
        client_id = "c" + ulid()
        self._seen(client_id, pipe_id)
        cfg = self.d.config
        return Welcome(
            client_id=client_id,
            server_version=_version(),
            event_endpoint=self.d.events_url,
            limits=Limits(max_message_bytes=self.max_bytes, replay_ring_events=cfg.replay.ring_events,
                          replay_keep_s=cfg.replay.keep_s),
            providers=sorted(self.d.slots),
        )

    # -- requests ---------------------------------------------------------------------

    def resolve(self, model: str, provider: str | None) -> ModelInfo | ErrorInfo:
        try:
            info = self.d.catalog.resolve(model, provider)
        except UnknownModel as exc:
            return _error("not_found", str(exc))
        slot = self.d.slots.get(info.provider)
        if slot is None:
            return _error("not_configured", f"provider {info.provider!r} is not configured on this daemon "
                          f"(configured: {', '.join(sorted(self.d.slots))})", provider=info.provider)
        if slot.state == "not_configured":
            return _error("not_configured", f"provider {info.provider!r} is not configured: {slot.last_error}",
                          provider=info.provider)
        return info

    def submit(self, msg: Submit, pipe_id: int) -> Any:
        d = self.d
        self._seen(msg.client_id, pipe_id)
        known = d.requests.get(msg.request_id)
        if known is not None:
            return Accepted(request_id=msg.request_id, provider=known.provider, model=known.model, duplicate=True)
        if not d.accepting:
            return Rejected(request_id=msg.request_id, error=_error("unavailable", "the daemon is shutting down"))
        if not msg.request_id:
            return Rejected(error=_error("invalid_request", "request_id is empty"))
        resolved = self.resolve(msg.request.model, msg.request.provider)
        if isinstance(resolved, ErrorInfo):
            return Rejected(request_id=msg.request_id, error=resolved)
        try:
            validate(msg.request, resolved, msg.stream)
        except Invalid as exc:
            return Rejected(request_id=msg.request_id, error=_error(exc.error_class, exc.message))
        slot = d.slots[resolved.provider]
        if slot.state == "unavailable":
            wait = max((slot.retry_at or 0.0) - trio.current_time(), 0.0)
            return Rejected(request_id=msg.request_id, error=_error(
                "unavailable", f"provider {slot.name} is unavailable ({slot.last_error}); next start in {wait:.0f}s",
                retry_after_s=round(wait, 3), provider=slot.name))
        operation_id = msg.operation_id or msg.request_id
        state = RequestState(msg.request_id, msg.client_id, slot.name, resolved.id, msg.stream, operation_id,
                             d.requests.ring_events, trio.current_time())
        if trace.ENABLED:
            state.trace = {"supervisor_received": self.received_ns}
        d.requests.add(state)
        slot.in_flight.add(msg.request_id)
        slot.send(Job(request_id=msg.request_id, client_id=msg.client_id, request=msg.request, model=resolved,
                      stream=msg.stream, operation_id=operation_id))
        return Accepted(request_id=msg.request_id, provider=slot.name, model=resolved.id)

    def cancel(self, msg: Cancel) -> CancelResult:
        state = self.d.requests.active.get(msg.request_id)
        if state is None:
            return CancelResult(request_id=msg.request_id, cancelled=False)
        self.d.cancel_request(state)
        return CancelResult(request_id=msg.request_id, cancelled=True)

    def replay(self, msg: Replay) -> ReplayResult:
        state = self.d.requests.get(msg.request_id)
        if state is None or state.evicted:
            return ReplayResult(request_id=msg.request_id, state="unknown", last_seq=-1)
        skip = 0
        frames = state.frames_from(msg.from_seq, REPLAY_BATCH)
        events = []
        for frame in frames:
            skip = frame.index(b"\x00") + 1
            events.append(msgspec.Raw(frame[skip:]))
        return ReplayResult(
            request_id=msg.request_id,
            events=events,
            first_seq=state.first_seq,
            last_seq=state.last_seq,
            state="ended" if state.ended else "running",
        )

    def status(self) -> StatusReport:
        d = self.d
        return StatusReport(
            server_version=_version(),
            pid=os.getpid(),
            uptime_s=round(trio.current_time() - d.started_at, 3),
            in_flight=len(d.requests.active),
            workers=[slot.status() for slot in d.slots.values()],
        )

    async def ready(self, msg: Ready) -> ReadyResult:
        resolved = self.resolve(msg.model, msg.provider)
        if isinstance(resolved, ErrorInfo):
            return ReadyResult(ok=False, model=msg.model, error=resolved)
        slot = self.d.slots[resolved.provider]
        if slot.state == "unavailable":
            return ReadyResult(ok=False, model=resolved.id, error=_error(
                "unavailable", f"provider {slot.name} is unavailable ({slot.last_error})", provider=slot.name))
        result = await slot.call(CheckReady(call_id=0, model=resolved), READY_TIMEOUT_S)
        return ReadyResult(ok=result.ok, model=resolved.id, error=result.error)

    async def count_tokens(self, msg: CountTokens) -> Any:
        resolved = self.resolve(msg.request.model, msg.request.provider)
        if isinstance(resolved, ErrorInfo):
            return Rejected(error=resolved)
        slot = self.d.slots[resolved.provider]
        if slot.state == "running":
            result = await slot.call(EstimateTokens(call_id=0, request=msg.request, model=resolved),
                                     COUNT_TIMEOUT_S)
            if result.ok:
                return TokenCount(input_tokens=result.input_tokens, exact=result.exact)
        return TokenCount(input_tokens=estimate_request_tokens(msg.request), exact=False)


class _Deferred:
    """A reply that needs awaiting (a worker's answer)."""

    __slots__ = ("coro",)

    def __init__(self, coro: Any) -> None:
        self.coro = coro

    async def run(self) -> Any:
        return await self.coro


def _version() -> str:
    from ..protocol import __version__

    return __version__
