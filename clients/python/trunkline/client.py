"""The Python client: the trunkline protocol, for trio and asyncio programs alike.

    async with Client() as client:
        response = await client.complete("mock:echo", "hello")
        async with client.stream("mock:echo", "hello") as stream:
            async for text in stream.text_stream:
                print(text, end="")

One background task drains the event socket and hands each event to the
request waiting for it, in `seq` order. A gap in `seq` (PUB/SUB dropped
events for a slow reader) or a long silence makes the client ask `replay`,
so a response is never silently incomplete.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream

from .config.loader import default_runtime_dir
from .errors import DaemonNotRunning, DaemonUnavailable, error_from_info
from .files import inline_local_files, max_file_bytes
from .protocol import codec, sp_wire
from .protocol.accumulate import StreamAccumulator
from .protocol.ids import request_id as new_request_id
from .protocol.messages import (
    Accepted,
    BusEvent,
    Cancel,
    CancelResult,
    CountTokens,
    ErrorEvent,
    ErrorInfo,
    EventsLost,
    Finish,
    Goodbye,
    Hello,
    ListModels,
    Message,
    ModelInfo,
    Models,
    Probe,
    ProbeEvent,
    ProtocolError,
    Ready,
    ReadyResult,
    Rejected,
    Replay,
    ReplayResult,
    Request,
    Response,
    StatusQuery,
    StatusReport,
    StreamEvent,
    Submit,
    TextDelta,
    TokenCount,
    Welcome,
)
from .transport import ControlSocket, Disconnected, EventSocket

PROBE_INTERVAL_S = 0.05


def build_request(
    model: str | Request, messages: str | Message | Sequence[Message] | None = None, **fields: Any
) -> Request:
    """A `Request` from a model and a prompt (or messages), with any other fields."""
    if isinstance(model, Request):
        if messages is None and not fields:
            return model
        base = msgspec.structs.asdict(model)
        if messages is not None:
            base["messages"] = _messages(messages)
        base.update(fields)
    else:
        if messages is None:
            raise TypeError("give the messages (or a prompt string) with the model")
        base = {"model": model, "messages": _messages(messages), **fields}
    try:
        # Plain dicts are welcome anywhere (tools, parts, options): convert checks them.
        return msgspec.convert(msgspec.to_builtins(base), Request)
    except msgspec.ValidationError as exc:
        raise TypeError(f"invalid request: {exc}") from None


def _messages(messages: str | Message | Sequence[Message]) -> list[Message]:
    if isinstance(messages, str):
        return [Message.user(messages)]
    if isinstance(messages, Message):
        return [messages]
    return list(messages)


class _Route:
    """Where one request's events go, in order, whatever order they arrive in."""

    def __init__(self, client: Client, request_id: str) -> None:
        self.client = client
        self.request_id = request_id
        self.next_seq = 0
        self.pending: dict[int, Any] = {}
        # A deque and an event rather than a memory channel: a request is short-lived,
        # and creating and draining a channel per request cost more than the rest of
        # the client's work for a small one.
        self.queue: deque[Any] = deque()
        self.wake: anyio.Event | None = None
        self.waiting_since = 0.0  # time.monotonic() when its consumer began to wait; 0: not waiting
        self.done = False
        self.recovering = False
        self.lost = 0  # events that could not be recovered (deltas only; the terminal is complete)
        self.recovered = 0  # events that came by replay because the subscription missed them

    def deliver(self, ev: Any) -> None:
        seq = ev.seq
        if self.done or seq < self.next_seq:
            return
        if seq > self.next_seq:
            self.pending[seq] = ev
            self.client._recover(self)
            return
        self._push(ev)
        while self.next_seq in self.pending:
            self._push(self.pending.pop(self.next_seq))

    def _push(self, ev: Any) -> None:
        self.next_seq = ev.seq + 1
        self.queue.append(ev)
        if type(ev) is Finish or type(ev) is ErrorEvent:
            self.done = True
            self.pending.clear()
            # Nothing more can arrive for it: the consumer holds the route itself.
            routes = self.client._routes
            if routes.get(self.request_id) is self:
                del routes[self.request_id]
        if self.wake is not None:
            self.wake.set()

    def skip_to(self, seq: int) -> None:
        """Events before `seq` are gone for good (the replay ring moved on)."""
        if seq > self.next_seq:
            self.lost += seq - self.next_seq
            self.next_seq = seq
            while self.next_seq in self.pending:
                self._push(self.pending.pop(self.next_seq))

    def fail(self, info: ErrorInfo) -> None:
        if not self.done:
            self._push(ErrorEvent(request_id=self.request_id, seq=self.next_seq, error=info))


class Client:
    """A connection to the trunkline daemon. Use as `async with Client() as client:`."""

    def __init__(
        self,
        runtime_dir: str | Path | None = None,
        *,
        control_endpoint: str | None = None,
        client_name: str = "trunkline-python",
        token: str | None = None,
        timeout_s: float = 30.0,
        silence_check_s: float = 5.0,
        watch_bus: bool = False,
    ) -> None:
        self.runtime_dir = Path(runtime_dir).expanduser() if runtime_dir else default_runtime_dir()
        self.control_endpoint = control_endpoint or f"ipc://{self.runtime_dir / 'control.ipc'}"
        self.client_name = client_name
        self.token = token or os.environ.get("TRUNKLINE_TOKEN")
        self.timeout_s = timeout_s
        self.silence_check_s = silence_check_s
        self.client_id = ""
        self.welcome: Welcome | None = None
        self._control: ControlSocket | None = None
        self._event_socket: EventSocket | None = None
        self._routes: dict[str, _Route] = {}
        self._tg: Any = None
        self._probe_seen: anyio.Event | None = None
        self._closed = False
        #: Tests set this to an unset event to hold the event reader (to make it fall behind).
        self.reader_gate: anyio.Event | None = None
        self.watch_bus = watch_bus
        #: With `watch_bus=True`: the daemon's observability events (`llm.*`, `worker.*`).
        self.bus_events: MemoryObjectReceiveStream[BusEvent]
        self._bus_send, self.bus_events = anyio.create_memory_object_stream[BusEvent](math.inf)

    # -- connection ---------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        await self._connect()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def _connect(self) -> None:
        try:
            kind, path = sp_wire.split_url(self.control_endpoint)
        except ValueError as exc:
            raise DaemonNotRunning(str(exc)) from None
        if kind == "ipc" and not Path(path).exists():
            raise DaemonNotRunning(f"no trunkline daemon is running (no socket at {path}); start one with "
                                   "`trunkline serve`, or point TRUNKLINE_RUNTIME_DIR at its runtime directory")
        self._control = ControlSocket(self.control_endpoint)
        try:
            await self._control.connect()
        except (OSError, Disconnected) as exc:
            raise DaemonNotRunning(f"no trunkline daemon answers at {self.control_endpoint} ({exc}); start one "
                                   "with `trunkline serve`") from None
        try:
            welcome = await self._call(Hello(client_name=self.client_name, token=self.token), timeout_s=10.0)
            assert type(welcome) is Welcome
            self.welcome = welcome
            self.client_id = welcome.client_id
            topics = (codec.topic_prefix(self.client_id),)
            if self.watch_bus:
                topics += (codec.topic_prefix(codec.BUS_TOPIC),)
            self._event_socket = EventSocket(welcome.event_endpoint, topics)
            try:
                await self._event_socket.connect()
            except (OSError, Disconnected) as exc:
                raise DaemonUnavailable(f"cannot subscribe to {welcome.event_endpoint}: {exc}") from None
            self._probe_seen = anyio.Event()
            self._tg = anyio.create_task_group()
            await self._tg.__aenter__()
            self._tg.start_soon(self._read_events)
            self._tg.start_soon(self._watch_silence)
            await self._probe()
        except BaseException:
            await self._teardown()
            raise

    async def _probe(self) -> None:
        """Publish-subscribe loses what is sent before the subscription is live; ask the
        daemon to publish a probe until one arrives, then the subscription works."""
        assert self._probe_seen is not None
        with anyio.fail_after(10.0):
            while not self._probe_seen.is_set():
                await self._call(Probe(client_id=self.client_id))
                with anyio.move_on_after(PROBE_INTERVAL_S):
                    await self._probe_seen.wait()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._control is not None and self.client_id and any(not r.done for r in self._routes.values()):
            try:
                await self._call(Goodbye(client_id=self.client_id), timeout_s=2.0)
            except (DaemonUnavailable, OSError):
                pass
        await self._teardown()

    async def _teardown(self) -> None:
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            self._tg = None
        for route in list(self._routes.values()):
            route.fail(ErrorInfo(error_class="cancelled", message="the client was closed"))
        if self._event_socket is not None:
            self._event_socket.close()
        if self._control is not None:
            self._control.close()

    async def _call(self, msg: Any, timeout_s: float | None = None) -> Any:
        """One control round trip. Any number may be in flight; a slow one (`ready`)
        never holds up the others."""
        assert self._control is not None
        data = codec.encode(msg)
        limit = timeout_s or self.timeout_s
        try:
            with anyio.fail_after(limit):
                raw = await self._control.call(data)
        except TimeoutError:
            raise DaemonUnavailable(f"the trunkline daemon did not answer within {limit:g}s") from None
        except (Disconnected, OSError) as exc:
            raise DaemonUnavailable(f"lost the trunkline daemon at {self.control_endpoint} ({exc})") from None
        reply = codec.decode_control_reply(raw)
        if type(reply) is ProtocolError:
            raise error_from_info(reply.error)
        return reply

    async def _read_events(self) -> None:
        events = self._event_socket
        assert events is not None
        mine = codec.topic_prefix(self.client_id)
        cut = len(mine)
        bus = codec.topic_prefix(codec.BUS_TOPIC)
        decode = codec.decode_event
        routes = self._routes
        burst = 0
        while True:
            if self.reader_gate is not None:
                await self.reader_gate.wait()
            try:
                batch = events.ready()
                if batch is None:
                    burst = 0
                    batch = await events.receive()
                else:
                    burst += 1
                    if burst >= 8:
                        # A long burst: let the consumers run before reading on.
                        burst = 0
                        await anyio.lowlevel.checkpoint()
            except Disconnected:
                await self._resubscribe()
                continue
            for data in batch:
                try:
                    if data.startswith(mine):
                        ev = decode(memoryview(data)[cut:])
                    elif data.startswith(bus):
                        self._bus_send.send_nowait(decode(memoryview(data)[len(bus):]))
                        continue
                    else:
                        continue
                except codec.DecodeError:
                    continue
                route = routes.get(ev.request_id)
                if route is not None:
                    route.deliver(ev)
                elif type(ev) is ProbeEvent and self._probe_seen is not None:
                    self._probe_seen.set()
                elif type(ev) is EventsLost:
                    for lost in list(routes.values()):
                        self._recover(lost)

    async def _resubscribe(self) -> None:
        """The daemon went away (a restart): subscribe again as soon as one listens.
        What was published meanwhile comes back by `replay`, or the request fails."""
        assert self._event_socket is not None
        self._event_socket.close()
        delay = 0.01
        while True:
            try:
                await self._event_socket.connect()
                return
            except (OSError, Disconnected):
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.5)

    async def _watch_silence(self) -> None:
        """A request whose consumer has waited `silence_check_s` with nothing arriving may
        have lost its last events (its terminal one included), so no later event can
        reveal the gap: ask `replay`. One task for all requests, not a timeout per wait
        (a cancel scope per event cost the client a tenth of its CPU per request)."""
        period = max(self.silence_check_s / 4, 0.01)
        while True:
            await anyio.sleep(period)
            now = time.monotonic()
            for route in list(self._routes.values()):
                since = route.waiting_since
                if since and now - since >= self.silence_check_s:
                    route.waiting_since = now  # then again after another silence
                    self._recover(route)

    def _recover(self, route: _Route) -> None:
        if route.recovering or self._tg is None:
            return
        route.recovering = True
        self._tg.start_soon(self._replay, route)

    async def _replay(self, route: _Route) -> None:
        """Fetch what this request's subscription missed, until nothing is missing."""
        try:
            while not route.done:
                result: ReplayResult = await self._call(Replay(request_id=route.request_id, from_seq=route.next_seq))
                if result.state == "unknown":
                    route.fail(ErrorInfo(error_class="unavailable", retryable=True, message=(
                        "the daemon no longer knows this request (it restarted, or the request expired)")))
                    return
                if result.first_seq > route.next_seq:
                    route.skip_to(result.first_seq)
                before = route.next_seq
                for raw in result.events:
                    route.deliver(codec.decode_event(raw))
                route.recovered += route.next_seq - before
                if not route.pending and (result.state == "running" or route.done):
                    return  # caught up; anything newer arrives as usual
                if not result.events:
                    return
        except (DaemonUnavailable, OSError) as exc:
            route.fail(ErrorInfo(error_class="unavailable", retryable=True, message=str(exc)))
        finally:
            route.recovering = False

    # -- requests -------------------------------------------------------------------------

    async def submit(self, request: Request, *, stream: bool = True, request_id: str | None = None,
                     operation_id: str | None = None) -> tuple[Accepted, _Route]:
        """Start a request; its events arrive on the returned route."""
        rid = request_id or new_request_id()
        request = await self._read_local_files(request)
        route = self._routes.get(rid) or _Route(self, rid)
        self._routes[rid] = route
        try:
            reply = await self._call(Submit(request_id=rid, client_id=self.client_id, request=request,
                                            stream=stream, operation_id=operation_id))
        except BaseException:
            self._routes.pop(rid, None)
            raise
        if type(reply) is Rejected:
            self._routes.pop(rid, None)
            raise error_from_info(reply.error, request_id=rid)
        return reply, route

    async def _read_local_files(self, request: Request) -> Request:
        """`path` parts become base64 `data` here: the daemon never reads a client's files."""
        limit = self.welcome.limits.max_message_bytes if self.welcome is not None else None
        return await inline_local_files(request, max_file_bytes(limit))

    async def _next_event(self, route: _Route) -> Any | None:
        """The request's next event in order; None once its terminal event was taken."""
        queue = route.queue
        while True:
            if queue:
                return queue.popleft()
            if route.done:
                return None
            route.wake = wake = anyio.Event()
            route.waiting_since = time.monotonic()  # `_watch_silence` looks at it
            try:
                await wake.wait()
            finally:
                route.wake = None
                route.waiting_since = 0.0

    async def _events(self, route: _Route) -> AsyncIterator[Any]:
        while (ev := await self._next_event(route)) is not None:
            yield ev

    async def complete(self, model: str | Request, messages: str | Message | Sequence[Message] | None = None,
                       *, request_id: str | None = None, **fields: Any) -> Response:
        """Run a request to the end and return its response (or raise its error)."""
        request = build_request(model, messages, **fields)
        _, route = await self.submit(request, stream=False, request_id=request_id)
        while (ev := await self._next_event(route)) is not None:
            if type(ev) is Finish:
                return ev.response
            if type(ev) is ErrorEvent:
                raise error_from_info(ev.error, ev.partial, route.request_id)
        raise DaemonUnavailable("the request ended without a terminal event")  # pragma: no cover

    def stream(self, model: str | Request, messages: str | Message | Sequence[Message] | None = None,
               *, request_id: str | None = None, **fields: Any) -> ResponseStream:
        """A streaming request: iterate it for events, `.text_stream` for text, `.response()` at the end."""
        return ResponseStream(self, build_request(model, messages, **fields), request_id)

    async def cancel(self, request_id: str) -> bool:
        result: CancelResult = await self._call(Cancel(request_id=request_id))
        return result.cancelled

    async def list_models(self, provider: str | None = None) -> list[ModelInfo]:
        result: Models = await self._call(ListModels(provider=provider))
        return result.models

    async def status(self) -> StatusReport:
        return await self._call(StatusQuery())  # type: ignore[no-any-return]

    async def ready(self, model: str, provider: str | None = None) -> ReadyResult:
        return await self._call(Ready(model=model, provider=provider),  # type: ignore[no-any-return]
                                timeout_s=max(self.timeout_s, 35.0))

    async def count_tokens(self, model: str | Request, messages: str | Message | Sequence[Message] | None = None,
                           **fields: Any) -> TokenCount:
        request = await self._read_local_files(build_request(model, messages, **fields))
        reply = await self._call(CountTokens(request=request))
        if type(reply) is Rejected:
            raise error_from_info(reply.error)
        return reply  # type: ignore[no-any-return]

    async def replay(self, request_id: str, from_seq: int = 0) -> ReplayResult:
        return await self._call(Replay(request_id=request_id, from_seq=from_seq))  # type: ignore[no-any-return]


class ResponseStream:
    """One streaming request. Submitted when entered (or first iterated); leaving the
    `async with` block before the end cancels the request."""

    def __init__(self, client: Client, request: Request, request_id: str | None) -> None:
        self.client = client
        self.request = request
        self.request_id = request_id or new_request_id()
        self.accepted: Accepted | None = None
        self.accumulator = StreamAccumulator()
        self._route: _Route | None = None
        self._started = False

    async def start(self) -> ResponseStream:
        if not self._started:
            self._started = True
            self.accepted, self._route = await self.client.submit(self.request, stream=True,
                                                                  request_id=self.request_id)
            self.accumulator = StreamAccumulator(self.accepted.provider)
        return self

    async def __aenter__(self) -> ResponseStream:
        return await self.start()

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._route is not None and not self.accumulator.done:
            with anyio.CancelScope(shield=True):
                try:
                    await self.client.cancel(self.request_id)
                except (DaemonUnavailable, OSError):
                    pass

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> StreamEvent:
        await self.start()
        if self.accumulator.done:
            raise StopAsyncIteration
        assert self._route is not None
        ev = await self.client._next_event(self._route)
        if ev is None:
            raise StopAsyncIteration
        self.accumulator.feed(ev)
        return ev  # type: ignore[no-any-return]

    @property
    def done(self) -> bool:
        return self.accumulator.done

    @property
    def lost_events(self) -> int:
        """Events neither the subscription nor `replay` could deliver (the ring had moved on)."""
        return self._route.lost if self._route else 0

    @property
    def recovered_events(self) -> int:
        """Events the subscription missed and `replay` brought back."""
        return self._route.recovered if self._route else 0

    async def response(self) -> Response:
        """Drain the stream and return the final response (raise its error)."""
        async for _ in self:
            pass
        acc = self.accumulator
        if acc.error is not None:
            raise error_from_info(acc.error, acc.partial, self.request_id)
        return acc.response()

    @property
    def text_stream(self) -> AsyncIterator[str]:
        return self._text()

    async def _text(self) -> AsyncIterator[str]:
        async for ev in self:
            if type(ev) is TextDelta:
                yield ev.text
        acc = self.accumulator
        if acc.error is not None:
            raise error_from_info(acc.error, acc.partial, self.request_id)

    async def cancel(self) -> bool:
        return await self.client.cancel(self.request_id)


__all__ = ["Client", "ResponseStream", "build_request"]
