"""The control socket: every request gets exactly one reply, and quickly.

Fast requests (submit, cancel, replay, probe, status...) are answered inline
by the receiving task; the two that need a worker's answer (`ready`,
`count_tokens`) get a task of their own so they never hold up a submit.
Nothing a client sends can crash this loop: unreadable input gets a
`protocol_error` reply.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, assert_never

import msgspec
import trio

from ..config.catalog import Catalog, UnknownModel
from ..config.loader import LimitsConfig, ReplayConfig
from ..protocol import codec, nng, trace
from ..protocol.codec import frame_event
from ..protocol.ids import ulid
from ..protocol.messages import (
    PROTOCOL_VERSION,
    RETRYABLE,
    UNKNOWN_CLIENT,
    Accepted,
    Cancel,
    CancelResult,
    CheckReady,
    ControlReply,
    ControlRequest,
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
    Reload,
    ReloadResult,
    Replay,
    ReplayResult,
    StatusQuery,
    StatusReport,
    Submit,
    TokenCount,
    WatchBus,
    WatchBusAck,
    Welcome,
    WorkerStatus,
)
from ..protocol.ratelog import RateLimitedLog
from ..protocol.tokens import estimate_request_tokens
from .admission.gate import Gate
from .admission.keys import DOOR, ClientKeys
from .admission.remote import SharedRequests
from .admission.routes import Plan, RouteRun, Routing
from .reload import JobPolicies
from .requests import RequestState, RequestTable
from .slot import WorkerSlot
from .validate import Invalid, validate

log = logging.getLogger("trunkline.supervisor")

#: Events per `replay` reply; a client asks again from where a reply ended.
REPLAY_BATCH = 5000
READY_TIMEOUT_S = 30.0
COUNT_TIMEOUT_S = 10.0
#: Model names whose resolution is remembered (a program names a few; past this many
#: the memory starts again, so names a client makes up cannot grow it).
RESOLVED_NAMES = 1024


def _error(error_class: ErrorClass, message: str, **extra: Any) -> ErrorInfo:
    return ErrorInfo(error_class=error_class, message=message, retryable=RETRYABLE[error_class], **extra)


class Router:
    """Answers the control socket. It is given the request table (where it records
    what it accepts), the worker slots (where it queues jobs, asks questions and
    cancels), what a new request is resolved and stamped with (`catalog`,
    `job_policies`: the daemon hands it a reload's with `reconfigure`), the limits and
    replay sizes bound at start, and callbacks for the rest: `publish` (an event),
    `reload`, and the metrics' and telemetry's hooks, each None when they are off."""

    def __init__(
        self,
        *,
        requests: RequestTable,
        slots: Mapping[str, WorkerSlot],
        catalog: Catalog,
        limits: LimitsConfig,
        replay: ReplayConfig,
        events_url: str,
        needs_token: bool,
        publish: Callable[[bytes], None],
        reload: Callable[[], ReloadResult],
        on_refused: Callable[[ErrorInfo], None] | None = None,
        on_started: Callable[[RequestState, dict[str, str]], None] | None = None,
        more_status: Callable[[], list[WorkerStatus]] | None = None,
        routing: Routing | None = None,
        gate: Gate | None = None,
        client_keys: ClientKeys | None = None,
    ) -> None:
        self.requests = requests
        self.slots = slots
        self.catalog = catalog
        #: By provider, the retry and timeout policies its jobs carry (a reload changed
        #: them since its worker started).
        self.job_policies: dict[str, JobPolicies] = {}
        self.limits = limits
        self.replay_config = replay
        self.events_url = events_url
        self.publish = publish
        self.reload = reload
        self.on_refused = on_refused
        self.on_started = on_started
        #: Children shown beside the workers in `status` (the HTTP front door's processes).
        self.more_status = more_status
        #: The configured routes (None without any: a submit then never looks).
        self.routing = routing
        self.accepting = True
        #: With shared state: request ids claimed across daemons (set by the daemon).
        self.shared: SharedRequests | None = None
        # A client id belongs to the control connection that said the `hello` it came
        # from: only that connection may submit under it, cancel, replay or say goodbye
        # for its requests.
        self.pipes: dict[int, set[str]] = {}  # control pipe -> the client ids it owns
        self.owner: dict[str, int] = {}  # client id -> its control pipe
        #: The client ids that said they do not subscribe to the bus (`hello.watch_bus`):
        #: when every client has, requests' bus events are not published at all.
        self.unwatched: set[str] = set()
        #: Told whether any client wants the bus, each time that changes.
        self.on_bus_watch: Callable[[bool], None] | None = None
        self._bus_watched = False
        self.max_bytes = limits.max_message_bytes
        self.token = os.environ.get("TRUNKLINE_TOKEN")
        # On a network control endpoint (tcp, tls+tcp, ws) a connection must say hello
        # with the token before anything else; these are the connections that did.
        self.needs_token = needs_token
        self.authenticated: set[int] = set()
        #: Client keys, limits and budgets (`admission.gate`); None when none are configured.
        self.gate = gate
        #: The tokens a hello may give: named client keys, the daemon's own, the front door's.
        self.client_keys = client_keys or ClientKeys({}, token=self.token)
        self.pipe_keys: dict[int, str] = {}  # control pipe -> the named key its hello gave
        self.door_pipes: set[int] = set()  # control pipes of the front door's processes
        self.received_ns = 0  # when the request being handled arrived (TRUNKLINE_TRACE_HOPS)
        self.bad_input_log = RateLimitedLog(log)
        #: Requests refused for a capability their model lacks (WARN, at most a few a second).
        self.capability_log = RateLimitedLog(log)
        self.started_at = 0.0
        #: What each (model, provider) a request named resolved to in `_resolved_in`: the
        #: catalog's lookups (and a pass-through entry's capabilities) cost a submit more
        #: than its validation. A catalog never changes; a reload brings another.
        self._resolved: dict[tuple[str, str | None], ModelInfo | ErrorInfo] = {}
        self._resolved_in = catalog

    def reconfigure(self, catalog: Catalog, job_policies: dict[str, JobPolicies]) -> None:
        """A reload's catalog and job policies, for every request from the next one."""
        self.catalog = catalog
        self.job_policies = job_policies

    def stop_accepting(self) -> None:
        """The daemon drains: every submit from now on is refused."""
        self.accepting = False

    async def serve(self, rep: nng.ControlServer, nursery: trio.Nursery, started_at: float) -> None:
        """Read control requests and answer each before reading the next (a slow one,
        which needs a worker, is answered by a task of its own). `started_at`: when the
        daemon started (trio's clock), for `status`."""
        self._rep = rep
        self._nursery = nursery
        self.started_at = started_at
        while True:
            body, header, pipe_id = await rep.recv()
            reply = self.on_request(body, header, pipe_id)
            if reply is not None:
                rep.reply(header, reply, nursery)

    def on_request(self, data: bytes, header: bytes, pipe_id: int) -> bytes | None:
        """One control request; None when the answer needs a worker (`ready`,
        `count_tokens`) and comes later."""
        if trace.ENABLED:
            self.received_ns = trace.now_ns()
        reply: ControlReply | _Deferred
        try:
            reply = self.handle(data, pipe_id)
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop the daemon
            reply = self._failed(exc)
        if isinstance(reply, _Deferred):
            self._nursery.start_soon(self._answer_later, header, reply)
            return None
        return codec.encode(reply)

    async def _answer_later(self, header: bytes, deferred: _Deferred) -> None:
        reply: ControlReply
        try:
            reply = await deferred.coro
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop the daemon
            reply = self._failed(exc)
        self._rep.reply(header, codec.encode(reply), self._nursery)

    def _failed(self, exc: Exception) -> ProtocolError:
        """A bug met while answering one request: that request's typed error, and one
        log line (at most a few a second, whatever the input; the traceback at debug)."""
        self.bad_input_log.note(f"control request failed ({type(exc).__name__}: {str(exc)[:200]})")
        log.debug("control request failed", exc_info=exc)
        return ProtocolError(error=_error("other", f"internal error: {type(exc).__name__}"))

    # -- dispatch --------------------------------------------------------------------

    def handle(self, data: bytes, pipe_id: int) -> ControlReply | _Deferred:
        """The reply to one control request. Unreadable input gets a typed
        `protocol_error` and one log line (rate-limited, so input cannot flood the
        log); a bug while handling it fails that request alone, also in one line."""
        try:
            reply = self._dispatch(data, pipe_id)
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop the daemon
            return self._failed(exc)
        if isinstance(reply, ProtocolError):
            self.bad_input_log.note(_refusal(reply.error, pipe_id))
        return reply

    def _dispatch(self, data: bytes, pipe_id: int) -> ControlReply | _Deferred:
        size = len(data)
        if size > self.max_bytes:
            return ProtocolError(
                error=_error(
                    "invalid_request",
                    f"message of {size} bytes exceeds the limit of {self.max_bytes} bytes "
                    "(limits.max_message_bytes; a message of exactly the limit is accepted)",
                )
            )
        try:
            msg: ControlRequest = codec.decode_control_request(data)
        except codec.DecodeError as exc:
            return ProtocolError(error=_error("invalid_request", str(exc)))
        if self.needs_token and not isinstance(msg, Hello) and pipe_id not in self.authenticated:
            return ProtocolError(error=_error("authentication", "this endpoint needs a hello with a valid token first"))
        # isinstance, not match: a class pattern costs more, and this is every submit's path.
        if isinstance(msg, Submit):
            if self.shared is not None:  # the request id is claimed in the shared store first
                return _Deferred(self.shared.submit(self, msg, pipe_id, size))
            reply = self.submit(msg, pipe_id, size)
            if self.on_refused is not None and isinstance(reply, Rejected):
                self.on_refused(reply.error)
            return reply
        if isinstance(msg, Cancel):
            return self.cancel(msg, pipe_id)
        if isinstance(msg, Replay):
            return self.replay(msg, pipe_id)
        if isinstance(msg, Probe):
            if self.owner.get(msg.client_id) != pipe_id:
                return ProtocolError(error=_not_yours(msg.client_id))
            self.publish(frame_event(msg.client_id, ProbeEvent(client_id=msg.client_id)))
            return ProbeSent()
        if isinstance(msg, Hello):
            return self.hello(msg, pipe_id)
        if isinstance(msg, ListModels):
            if msg.model is not None:
                return Models(models=self.model_info(msg.model, msg.provider))
            return Models(models=self.catalog.models(msg.provider))
        if isinstance(msg, StatusQuery):
            return self.status()
        if isinstance(msg, Ready):
            return _Deferred(self.ready(msg))
        if isinstance(msg, CountTokens):
            return _Deferred(self.count_tokens(msg))
        if isinstance(msg, Goodbye):
            return self.goodbye(msg, pipe_id)
        if isinstance(msg, Reload):
            return self.reload()
        if isinstance(msg, WatchBus):
            return self.watch_bus(msg, pipe_id)
        assert_never(msg)  # mypy checks that every control request is answered above

    # -- clients -----------------------------------------------------------------------

    def pipe_gone(self, pipe_id: int) -> None:
        """A control connection closed: its clients have gone away, and their
        unfinished requests are cancelled upstream."""
        self.authenticated.discard(pipe_id)
        self.pipe_keys.pop(pipe_id, None)
        self.door_pipes.discard(pipe_id)
        for client_id in self.pipes.pop(pipe_id, set()):
            self.owner.pop(client_id, None)
            self.unwatched.discard(client_id)
            n = self.client_gone(client_id)
            if n:
                log.info("client %s went away; cancelled %d request(s)", client_id, n)
        self._bus_watch_changed()

    def goodbye(self, msg: Goodbye, pipe_id: int) -> GoodbyeAck | ProtocolError:
        """The client leaves: its unfinished requests are cancelled and its id retired."""
        if self.owner.get(msg.client_id) != pipe_id:
            return ProtocolError(error=_not_yours(msg.client_id))
        del self.owner[msg.client_id]
        self.pipes.get(pipe_id, set()).discard(msg.client_id)
        self.unwatched.discard(msg.client_id)
        self._bus_watch_changed()
        return GoodbyeAck(cancelled=self.client_gone(msg.client_id))

    def watch_bus(self, msg: WatchBus, pipe_id: int) -> WatchBusAck | ProtocolError:
        if self.owner.get(msg.client_id) != pipe_id:
            return ProtocolError(error=_not_yours(msg.client_id))
        if msg.watch:
            self.unwatched.discard(msg.client_id)
        else:
            self.unwatched.add(msg.client_id)
        self._bus_watch_changed()
        return WatchBusAck(watch=msg.watch)

    def _bus_watch_changed(self) -> None:
        # A client that never said (an older one) wants the bus: only a promise not to
        # subscribe lets the daemon skip publishing, so every PROTOCOL.md client still
        # gets every bus event it could subscribe to.
        watched = len(self.owner) > len(self.unwatched)
        if watched != self._bus_watched:
            self._bus_watched = watched
            if self.on_bus_watch is not None:
                self.on_bus_watch(watched)

    def client_gone(self, client_id: str) -> int:
        n = 0
        for state in self.requests.of_client(client_id):
            self.slots[state.provider].cancel(state)
            n += 1
        return n

    def hello(self, msg: Hello, pipe_id: int) -> Welcome | ProtocolError:
        if msg.protocol > PROTOCOL_VERSION:
            return ProtocolError(
                error=_error(
                    "invalid_request", f"protocol {msg.protocol} is newer than this daemon's {PROTOCOL_VERSION}"
                )
            )
        who = self.client_keys.identify(msg.token) if msg.token else None
        if self.needs_token:
            if who is None:
                return ProtocolError(error=_error("authentication", "this endpoint needs a valid token in hello"))
            self.authenticated.add(pipe_id)
        elif who is None and msg.token and self.client_keys.names:
            # A misspelt key must not pass as no key at all (whose requests no limit counts).
            return ProtocolError(error=_error("authentication", "the token in hello names no client key"))
        if who == DOOR:
            self.door_pipes.add(pipe_id)
        elif who:
            self.pipe_keys[pipe_id] = who
        client_id = "c" + ulid()
        self.owner[client_id] = pipe_id
        self.pipes.setdefault(pipe_id, set()).add(client_id)
        if not msg.watch_bus:
            self.unwatched.add(client_id)
        self._bus_watch_changed()
        return Welcome(
            client_id=client_id,
            server_version=_version(),
            event_endpoint=self.events_url,
            limits=Limits(
                max_message_bytes=self.max_bytes,
                max_event_bytes=self.limits.max_event_bytes,
                replay_ring_events=self.replay_config.ring_events,
                replay_keep_s=self.replay_config.keep_s,
            ),
            providers=sorted(self.slots),
            bus_on_demand=True,
        )

    # -- requests ---------------------------------------------------------------------

    def model_info(self, model: str, provider: str | None) -> list[ModelInfo]:
        """The entry a submit naming `model` (and `provider`) would be served by, as a
        list of one; none when the name resolves to no model. The same resolution as a
        submit's, whether or not the provider is configured (`configured` says)."""
        if self.routing is not None and provider is None:
            route = self.routing.model_info(model)
            if route is not None:
                return [route]
        info = self.entry(model, provider)
        return [] if isinstance(info, ErrorInfo) else [info]

    def entry(self, model: str, provider: str | None) -> ModelInfo | ErrorInfo:
        """The catalog entry (or pass-through) a model name resolves to."""
        if self._resolved_in is not self.catalog:
            self._resolved, self._resolved_in = {}, self.catalog
        key = (model, provider)
        known = self._resolved.get(key)
        if known is None:
            known = self._entry(model, provider)
            if len(self._resolved) >= RESOLVED_NAMES:
                self._resolved.clear()
            self._resolved[key] = known
        return known

    def _entry(self, model: str, provider: str | None) -> ModelInfo | ErrorInfo:
        try:
            info = self.catalog.resolve(model, provider)
        except UnknownModel as exc:
            return _error("not_found", str(exc))
        if not info.wire_name.strip():
            return _error(
                "invalid_request",
                f"the model name is empty: {model!r} names provider {info.provider!r} "
                f"but no model of it (e.g. {info.provider}:<model>; `trunkline models --provider "
                f"{info.provider}` lists them)",
            )
        return info

    def resolve(self, model: str, provider: str | None) -> ModelInfo | ErrorInfo:
        """The entry a request for `model` is served by, if its provider can serve it now."""
        info = self.entry(model, provider)
        if isinstance(info, ErrorInfo):
            return info
        slot = self.slots.get(info.provider)
        if slot is None:
            return _error(
                "not_configured",
                f"provider {info.provider!r} is not configured on this daemon "
                f"(configured: {', '.join(sorted(self.slots))})",
                provider=info.provider,
            )
        if slot.state == "not_configured":
            return _error(
                "not_configured",
                f"provider {info.provider!r} is not configured: {slot.last_error}",
                provider=info.provider,
            )
        return info

    def submit(self, msg: Submit, pipe_id: int, size: int = 0) -> Accepted | Rejected | _Deferred:
        if self.owner.get(msg.client_id) != pipe_id:
            return Rejected(request_id=msg.request_id, error=_not_yours(msg.client_id))
        known = self.requests.get(msg.request_id)
        if known is not None:
            if known.client_id != msg.client_id:
                return Rejected(
                    request_id=msg.request_id,
                    error=_error(
                        "invalid_request",
                        f"request_id {msg.request_id!r} is in use by another client; choose another "
                        "(a ULID or a UUID never collides)",
                    ),
                )
            return Accepted(request_id=msg.request_id, provider=known.provider, model=known.model, duplicate=True)
        if not self.accepting:
            return Rejected(request_id=msg.request_id, error=_error("unavailable", "the daemon is shutting down"))
        if not msg.request_id:
            return Rejected(error=_error("invalid_request", "request_id is empty"))
        if msg.trace_context:
            problem = trace_context_problem(msg.trace_context)
            if problem:
                return Rejected(request_id=msg.request_id, error=_error("invalid_request", problem))
        plan = self.routing.plan(msg) if self.routing is not None else None
        if isinstance(plan, ErrorInfo):
            return Rejected(request_id=msg.request_id, error=plan)
        resolved = self.resolve(msg.request.model, msg.request.provider) if plan is None else plan.first
        if isinstance(resolved, ErrorInfo):
            return Rejected(request_id=msg.request_id, error=resolved)
        slot = self.slots[resolved.provider]
        try:
            validate(msg.request, resolved, msg.stream, slot.config.type)
        except Invalid as exc:
            if exc.capability is not None:
                self.capability_log.note(f"refused request {msg.request_id[:64]!r} before any call: {exc.message}")
            return Rejected(request_id=msg.request_id, error=_error(exc.error_class, exc.message))
        if slot.state == "unavailable":
            wait = max((slot.retry_at or 0.0) - trio.current_time(), 0.0)
            return Rejected(
                request_id=msg.request_id,
                error=_error(
                    "unavailable",
                    f"provider {slot.name} is unavailable ({slot.last_error}); next start in {wait:.0f}s",
                    retry_after_s=round(wait, 3),
                    provider=slot.name,
                ),
            )
        over = self.over_client_limits(pipe_id, size)
        if over is not None:
            return Rejected(request_id=msg.request_id, error=over)
        run: RouteRun | None = None
        # A route with a gate is decided in the gate's ticket, with its key: the deployment
        # (and so its worker and key) is known once it is admitted. Without one, now.
        gated = plan is not None and self.gate is not None
        if plan is not None and self.routing is not None and self.gate is None:
            admitted = self.routing.admit(plan, msg.request_id, msg.request)
            if isinstance(admitted, ErrorInfo):
                return Rejected(request_id=msg.request_id, error=admitted)
            run = admitted
            resolved, slot = run.deployment.info, self.slots[run.deployment.provider]
        key = 0
        if not gated:
            picked = _key_for(slot, run)
            if isinstance(picked, ErrorInfo):
                if run is not None and self.routing is not None:
                    self.routing.release(run, msg.request_id)
                return Rejected(request_id=msg.request_id, error=picked)
            key = picked
        operation_id = msg.operation_id or msg.request_id
        state = RequestState(
            msg.request_id,
            msg.client_id,
            slot.name,
            resolved.id,
            msg.stream,
            operation_id,
            self.requests.ring_events,
            trio.current_time(),
            owner=pipe_id,
            size=size,
        )
        if trace.ENABLED:
            state.trace = {"supervisor_received": self.received_ns}
        state.resolved = resolved
        state.route = run
        job = state.job = Job(
            request_id=msg.request_id,
            client_id=msg.client_id,
            request=msg.request,
            model=resolved,
            stream=msg.stream,
            operation_id=operation_id,
            key_index=key,
            deployment=run.deployment.id if run is not None else None,
        )
        if slot.name in self.job_policies:  # a reload changed them since the worker started
            job.retry, job.timeouts = self.job_policies[slot.name]
        if self.gate is not None or msg.client_key is not None:
            refused = self.admit(msg, pipe_id, state, resolved, plan)
            if refused is not None:
                return refused
        if gated and plan is not None:
            return self._routed(msg, state, plan)
        return self._start(msg, state, slot, job)

    def _routed(self, msg: Submit, state: RequestState, plan: Plan) -> Accepted | Rejected:
        """A routed request the gate admitted: the deployment its ticket took serves it,
        with that deployment's key (else its provider's in turn), then it starts."""
        assert self.routing is not None
        assert self.gate is not None
        assert state.job is not None
        held = state.admission
        run = state.route = self.routing.take(
            plan, held.deployment if held is not None else None, msg.request, held.tokens if held is not None else 0
        )
        deployment = run.deployment
        slot = self.slots[deployment.provider]
        key = _key_for(slot, run)
        if isinstance(key, ErrorInfo):
            self.routing.release(run, msg.request_id)
            self.gate.discard(state)
            return Rejected(request_id=msg.request_id, error=key)
        job = state.job
        job.key_index = key
        job.deployment = deployment.id
        if deployment.info is not state.resolved:  # not the plan's first: the request and its job move
            state.provider, state.model, state.resolved = slot.name, deployment.info.id, deployment.info
            job.model = deployment.info
            job.retry, job.timeouts = self.job_policies.get(slot.name, (None, None))
        return self._start(msg, state, slot, job)

    def _start(self, msg: Submit, state: RequestState, slot: WorkerSlot, job: Job) -> Accepted:
        """Record an accepted request and queue its job."""
        if self.on_started is not None:
            self.on_started(state, msg.trace_context)  # before the send, which lets the job go
        self.requests.add(state)
        try:
            slot.send(job)
        except Exception:
            # Answered with an error: nothing of it may stay behind as `running`.
            self.requests.discard(state)
            if state.route is not None and self.routing is not None:
                self.routing.release(state.route, msg.request_id)
            if self.gate is not None:
                self.gate.discard(state)
            raise
        return Accepted(request_id=msg.request_id, provider=slot.name, model=state.model)

    def admit(
        self, msg: Submit, pipe_id: int, state: RequestState, resolved: ModelInfo, plan: Plan | None = None
    ) -> Rejected | _Deferred | None:
        """The client key's and the deployment's limits and budgets (`admission.gate`):
        None when admitted; a refusal; or, with a store that must be awaited, the reply
        to come. A `client_key` is trusted from the front door's connections only. A
        route's `plan`: its deployments are the ticket's candidates."""
        key = self.pipe_keys.get(pipe_id, "")
        if msg.client_key is not None:
            if pipe_id not in self.door_pipes:
                return Rejected(
                    request_id=msg.request_id,
                    error=_error(
                        "access_denied",
                        "client_key is set by the daemon's HTTP front door only; a connection's key is "
                        "the one its hello's token names",
                    ),
                )
            key = msg.client_key
        if self.gate is None:
            if not key:
                return None
            return Rejected(
                request_id=msg.request_id, error=_error("invalid_request", f"no client key is named {key!r}")
            )
        if msg.request_id in self.gate.pending:
            return Rejected(
                request_id=msg.request_id,
                error=_error("invalid_request", f"request_id {msg.request_id!r} is being admitted already"),
            )
        if plan is None:
            verdict = self.gate.admit(state, msg.request, resolved, key)
        else:
            verdict = self.gate.admit(state, msg.request, resolved, key, plan.candidates(), plan.route.needs_tokens)
        if verdict is None:
            return None
        if isinstance(verdict, ErrorInfo):
            return Rejected(request_id=msg.request_id, error=verdict)
        return _Deferred(self._start_when_admitted(verdict, msg, state, plan))

    async def _start_when_admitted(
        self,
        verdict: Coroutine[Any, Any, ErrorInfo | None],
        msg: Submit,
        state: RequestState,
        plan: Plan | None = None,
    ) -> Accepted | Rejected:
        refused = await verdict
        slot = self.slots[state.provider]
        if refused is None and (not self.accepting or msg.client_id not in self.owner):
            # Meanwhile the daemon began to stop, or the client left: what was admitted is given back.
            gone = "the daemon is shutting down" if not self.accepting else "the client went away"
            refused = _error("unavailable", gone)
            if self.gate is not None:
                self.gate.discard(state)
        if refused is not None:
            if self.on_refused is not None:
                self.on_refused(refused)
            return Rejected(request_id=msg.request_id, error=refused)
        if plan is not None:
            reply = self._routed(msg, state, plan)
            if self.on_refused is not None and isinstance(reply, Rejected):
                self.on_refused(reply.error)
            return reply
        job = state.job
        assert job is not None  # it is sent by `_start` only
        return self._start(msg, state, slot, job)

    def over_client_limits(self, pipe_id: int, size: int) -> ErrorInfo | None:
        """Why one more request of `size` bytes from this connection is refused (its
        requests running, or their bytes, at the limit), or None."""
        limits = self.limits
        running, held = self.requests.load_of(pipe_id)
        if running >= limits.max_requests_per_client:
            return _error(
                "rate_limit",
                f"this connection already has {running} requests running, the limit "
                f"(limits.max_requests_per_client = {limits.max_requests_per_client}); submit again "
                "when one has ended",
            )
        if held + size > limits.max_bytes_per_client:
            return _error(
                "rate_limit",
                f"this connection's running requests hold {held} bytes of submits; "
                f"{size} more would pass the limit (limits.max_bytes_per_client = "
                f"{limits.max_bytes_per_client}); submit again when one has ended",
            )
        return None

    def cancel(self, msg: Cancel, pipe_id: int) -> CancelResult:
        """Only the client that submitted a request may cancel it; another's request
        looks like one that does not exist."""
        state = self.requests.active.get(msg.request_id)
        if state is None or self.owner.get(state.client_id) != pipe_id:
            return CancelResult(request_id=msg.request_id, cancelled=False)
        self.slots[state.provider].cancel(state)
        return CancelResult(request_id=msg.request_id, cancelled=True)

    def replay(self, msg: Replay, pipe_id: int) -> ReplayResult:
        state = self.requests.get(msg.request_id)
        if state is None and self.shared is not None:  # one another daemon serves, followed here
            followed = self.shared.replay(msg, lambda client_id: self.owner.get(client_id) == pipe_id)
            if followed is not None:
                return followed
        if state is None or (not state.ring and state.evicted) or self.owner.get(state.client_id) != pipe_id:
            return ReplayResult(request_id=msg.request_id, state="unknown", last_seq=-1)
        skip = 0
        frames = state.frames_from(msg.from_seq, REPLAY_BATCH)
        events: list[msgspec.Raw] = []
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

    def status(self) -> StatusReport | _Deferred:
        report = StatusReport(
            server_version=_version(),
            pid=os.getpid(),
            uptime_s=round(trio.current_time() - self.started_at, 3),
            in_flight=len(self.requests.active),
            workers=[slot.status() for slot in self.slots.values()]
            + (self.more_status() if self.more_status is not None else []),
            shared_state=self.shared.status() if self.shared is not None else None,
        )
        if self.gate is not None:
            keys = self.gate.use_now()
            if keys is None:  # a shared store: asked, then answered
                return _Deferred(self._with_use(report, self.gate))
            report.keys = keys
        return report

    @staticmethod
    async def _with_use(report: StatusReport, gate: Gate) -> StatusReport:
        report.keys = await gate.use()
        return report

    async def ready(self, msg: Ready) -> ReadyResult:
        resolved = self.resolve(msg.model, msg.provider)
        if isinstance(resolved, ErrorInfo):
            return ReadyResult(ok=False, model=msg.model, error=resolved)
        slot = self.slots[resolved.provider]
        if slot.state == "unavailable":
            return ReadyResult(
                ok=False,
                model=resolved.id,
                error=_error(
                    "unavailable", f"provider {slot.name} is unavailable ({slot.last_error})", provider=slot.name
                ),
            )
        result = await slot.call(CheckReady(call_id=0, model=resolved), READY_TIMEOUT_S)
        return ReadyResult(ok=result.ok, model=resolved.id, error=result.error)

    async def count_tokens(self, msg: CountTokens) -> TokenCount | Rejected:
        resolved = self.resolve(msg.request.model, msg.request.provider)
        if isinstance(resolved, ErrorInfo):
            return Rejected(error=resolved)
        slot = self.slots[resolved.provider]
        if slot.state == "running":
            result = await slot.call(EstimateTokens(call_id=0, request=msg.request, model=resolved), COUNT_TIMEOUT_S)
            if result.ok:
                return TokenCount(input_tokens=result.input_tokens, exact=result.exact)
        return TokenCount(input_tokens=estimate_request_tokens(msg.request), exact=False)


def _key_for(slot: WorkerSlot, run: RouteRun | None) -> int | ErrorInfo:
    """The deployment's own key, else the provider's keys in turn (skipping resting ones)."""
    if run is not None and run.deployment.key_index is not None:
        return run.deployment.key_index
    if slot.keyring is not None:
        return slot.keyring.next_key()
    return 0


def _refusal(error: ErrorInfo, pipe_id: int) -> str:
    """The log line for a refused control request: a refused token names the address
    it came from (never the token), as an operator needs to find the client."""
    if error.error_class == "authentication":
        return f"refused a client at {nng.peer_address(pipe_id)}: {error.message}"
    return f"unreadable control request: {error.message[:200]}"


def _not_yours(client_id: str) -> ErrorInfo:
    return _error(
        "invalid_request",
        f"client_id {client_id!r} was not given to this connection: say hello on it "
        "first and use the client_id its welcome names",
        provider_code=UNKNOWN_CLIENT,
    )


class _Deferred:
    """A reply that needs awaiting (a worker's answer)."""

    __slots__ = ("coro",)

    def __init__(self, coro: Coroutine[Any, Any, ControlReply]) -> None:
        self.coro = coro


def _version() -> str:
    from ..protocol import __version__

    return __version__


#: Bound on each `Submit.trace_context` value (W3C allows 32 tracestate members and 8
#: KiB of baggage); the number of entries is bounded as the submit is read.
TRACE_CONTEXT_VALUE_CHARS = 8192


def trace_context_problem(carrier: dict[str, str]) -> str | None:
    """Why a submit's trace context is refused (too much of it), or None. Values that
    do not parse are not refused: W3C has them ignored, and the call starts a new trace."""
    for key, value in carrier.items():
        if len(key) > 64 or len(value) > TRACE_CONTEXT_VALUE_CHARS:
            return (
                f"trace_context.{key[:64]} is too long: keys take at most 64 characters, values at most "
                f"{TRACE_CONTEXT_VALUE_CHARS}"
            )
    return None
