"""A client's connection to the daemon: its two sockets, its session, its events.

Calls go on the control socket (nng Req0), any number at once. The client's
events come on the event socket (Sub0), where one background task hands each to
its request's `Route`, in `seq` order. A gap in `seq` (publish-subscribe drops
events for a slow reader) or a long silence makes the connection ask `replay`,
so a response is never silently incomplete; a lost control connection fails the
requests it carried at once (the daemon cancels them when it goes).

The session is a `hello` (said again after the daemon restarts) and a probe:
publish-subscribe loses what is sent before a subscription is live.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.abc
import sniffio
import trio
from anyio.streams.memory import MemoryObjectSendStream

from .endpoints import event_url, plain_tcp_hint
from .errors import DaemonNotRunning, DaemonUnavailable, TrunklineError, error_from_info
from .protocol import codec, nng
from .protocol.messages import (
    BusEvent,
    ErrorInfo,
    Goodbye,
    Hello,
    Probe,
    ProbeEvent,
    ProtocolError,
    Replay,
    ReplayResult,
    WatchBus,
    WatchBusAck,
    Welcome,
)
from .routing import Route, Wake
from .tls import ClientTLS, closed_early, refused_handshake

PROBE_INTERVAL_S = 0.05
#: What a client that found no local daemon adds: the daemon can be started by clients.
AUTOSTART_HINT = ", or let the client start it: Client(autostart=True) or TRUNKLINE_AUTOSTART=1"

Reply = TypeVar("Reply")


def not_open_error(closed: bool) -> RuntimeError:
    """What a call on a client that is not connected says."""
    if closed:
        return RuntimeError(
            "this Client is closed (its `async with` block has ended); open another with "
            "`async with Client() as client:`"
        )
    return RuntimeError(
        "this Client is not connected: use it as `async with Client() as client:` (the block "
        "connects to the daemon and closes the connection at its end)"
    )


class Connection:
    """One session with the daemon at `control_endpoint` (see the module's docstring).
    `bus`, when given, receives the daemon's observability events."""

    def __init__(
        self,
        control_endpoint: str,
        *,
        client_name: str,
        token: str | None,
        timeout_s: float,
        silence_check_s: float,
        tls: ClientTLS,
        bus: MemoryObjectSendStream[BusEvent] | None = None,
    ) -> None:
        self.control_endpoint = control_endpoint
        self.timeout_s = timeout_s
        self._client_name = client_name
        self._token = token
        self._silence_check_s = silence_check_s
        self._tls = tls
        self._bus = bus
        self.client_id = ""
        self.welcome: Welcome | None = None
        self.control: nng.Requester | None = None
        self.sub: nng.Subscriber | None = None
        #: The requests whose events are still to come, by request id.
        self.routes: dict[str, Route] = {}
        #: Tests set this to an unset event to hold the event reader (to make it fall behind).
        self.reader_gate: anyio.Event | None = None
        self.closed = False
        self._hello_at = 0  # the control socket's connection count when we said hello
        self._rehello_lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self._probe_seen: anyio.Event | None = None
        #: True once a request asked for its bus events (a route with `on_bus`).
        self._bus_for_routes = False
        #: What a route waits on: trio's own event inside trio (set when the connection
        #: opens), anyio's elsewhere.
        self._new_event: Callable[[], Wake] = anyio.Event

    # -- the session --------------------------------------------------------------------

    async def connect(self) -> None:
        if sniffio.current_async_library() == "trio":
            self._new_event = trio.Event
        endpoint = self.control_endpoint
        try:
            nng.check_url(endpoint)
        except ValueError as exc:
            raise DaemonNotRunning(str(exc)) from None
        path = nng.ipc_path(endpoint)
        if path is not None and not path.exists():
            raise DaemonNotRunning(
                f"no trunkline daemon is running (no socket at {path}); start one with "
                "`trunkline serve`, or point TRUNKLINE_RUNTIME_DIR at its runtime directory"
                f"{AUTOSTART_HINT}"
            )
        tls = self._tls.config(endpoint)
        try:
            # Dialling waits for the connection (and a TLS handshake): off the event loop.
            self.control = await anyio.to_thread.run_sync(nng.Requester, endpoint, tls)
        except (OSError, nng.NNGException) as exc:
            if nng.is_tls(endpoint) and refused_handshake(exc):
                # Something answered and the handshake failed: a daemon runs, and this
                # client does not trust it (or it is not the one named).
                raise await self._tls.handshake_failed(endpoint, exc) from None
            if nng.is_tls(endpoint) and closed_early(exc):
                # The daemon may close the connection before this side reports the
                # handshake's own failure (seen on a loaded machine): `ssl` names the cause.
                named = await self._tls.handshake_cause(endpoint, exc)
                if named is not None:
                    raise named from None
            if closed_early(exc) and plain_tcp_hint(endpoint):
                raise DaemonNotRunning(
                    f"{endpoint} closed the connection before a daemon answered ({exc}){plain_tcp_hint(endpoint)}"
                ) from None
            hint = AUTOSTART_HINT if path is not None else ""
            raise DaemonNotRunning(
                f"no trunkline daemon answers at {endpoint} ({exc}); start one with `trunkline serve`{hint}"
            ) from None
        try:
            self._hello_at = self.control.connects
            try:
                welcome = await self._hello()
            except DaemonUnavailable as exc:
                raise DaemonUnavailable(f"{exc}{plain_tcp_hint(endpoint)}") from None
            topics: tuple[bytes, ...] = (codec.topic_prefix(self.client_id),)
            if self._bus is not None:
                topics += (codec.topic_prefix(codec.BUS_TOPIC),)
            url = event_url(welcome.event_endpoint, endpoint)
            try:
                self.sub = await anyio.to_thread.run_sync(nng.Subscriber, url, topics, self._tls.config(url))
            except (OSError, nng.NNGException) as exc:
                if nng.is_tls(url) and refused_handshake(exc):
                    raise await self._tls.handshake_failed(url, exc) from None
                raise DaemonUnavailable(f"cannot subscribe to {url}: {exc}") from None
            self._probe_seen = anyio.Event()
            self._tg = anyio.create_task_group()
            await self._tg.__aenter__()
            self._tg.start_soon(self._read_events)
            self._tg.start_soon(self._watch_silence)
            await self._probe()
        except BaseException:
            await self._teardown()
            raise

    async def _hello(self) -> Welcome:
        hello = Hello(
            client_name=self._client_name,
            token=self._token,
            watch_bus=self._bus is not None or self._bus_for_routes,
        )
        welcome = await self.ask(hello, Welcome, timeout_s=10.0)
        self.welcome = welcome
        self.client_id = welcome.client_id
        return welcome

    async def hello_again(self, force: bool = False) -> None:
        """Our control connection was made anew since our hello: the daemon restarted
        (or the connection dropped, and the daemon let our client id go with it). Say
        hello on it, subscribe to the new client id, and probe, once for all callers."""
        assert self.control is not None
        assert self.sub is not None
        async with self._rehello_lock:
            if self.control.connects == self._hello_at and not force:
                return
            self._hello_at = self.control.connects
            await self._hello()
            self.sub.subscribe(codec.topic_prefix(self.client_id))
            self._probe_seen = anyio.Event()
            await self._probe()

    @property
    def reconnected(self) -> bool:
        """Whether the control connection was made anew since our last hello."""
        return self.control is not None and self.control.connects != self._hello_at

    async def _probe(self) -> None:
        """Publish-subscribe loses what is sent before the subscription is live; ask the
        daemon to publish a probe until one arrives, then the subscription works."""
        assert self._probe_seen is not None
        with anyio.fail_after(10.0):
            while not self._probe_seen.is_set():
                await self.call(Probe(client_id=self.client_id))
                with anyio.move_on_after(PROBE_INTERVAL_S):
                    await self._probe_seen.wait()

    async def close(self) -> None:
        if self.closed:
            return
        try:
            if self.control is not None and self.client_id and any(not r.done for r in self.routes.values()):
                # Closing the connection cancels them as well, should the goodbye fail.
                with contextlib.suppress(DaemonUnavailable, OSError, TrunklineError):
                    await self.call(Goodbye(client_id=self.client_id), timeout_s=2.0)
        finally:
            self.closed = True  # from here on, a call says the client is closed
            await self._teardown()

    async def _teardown(self) -> None:
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            self._tg = None
        for route in list(self.routes.values()):
            route.fail(ErrorInfo(error_class="cancelled", message="the client was closed"))
        if self.sub is not None:
            self.sub.close()
        if self.control is not None:
            self.control.close()

    # -- calls --------------------------------------------------------------------------

    async def call(self, msg: Any, timeout_s: float | None = None, slow: bool = False) -> Any:
        """One control round trip: the daemon's reply (a `ProtocolError` raised as the
        error it carries). Any number may be in flight; a slow one (`ready`,
        `count_tokens`) never holds up the others."""
        if self.control is None or self.closed:
            raise not_open_error(self.closed)
        data = codec.encode(msg)
        limits = self.welcome.limits if self.welcome is not None else None
        if limits is not None and len(data) > limits.max_message_bytes:
            # nng would close the connection for it: say why here instead.
            raise error_from_info(
                ErrorInfo(
                    error_class="invalid_request",
                    message=(
                        f"message of {len(data)} bytes exceeds the daemon's limit of {limits.max_message_bytes} bytes"
                    ),
                )
            )
        limit = timeout_s or self.timeout_s
        try:
            raw = await self.control.call(data, slow, limit)
        except TimeoutError:
            raise DaemonUnavailable(f"the trunkline daemon did not answer within {limit:g}s") from None
        except (nng.NNGException, OSError) as exc:
            raise DaemonUnavailable(f"lost the trunkline daemon at {self.control_endpoint} ({exc})") from None
        reply = codec.decode_control_reply(raw)
        if isinstance(reply, ProtocolError):
            raise error_from_info(reply.error)
        return reply

    async def ask(self, msg: Any, reply: type[Reply], timeout_s: float | None = None, slow: bool = False) -> Reply:
        """`call` for a request with one kind of reply."""
        answer = await self.call(msg, timeout_s, slow)
        if not isinstance(answer, reply):
            raise DaemonUnavailable(f"the daemon answered {type(msg).__name__} with {type(answer).__name__}")
        return answer

    def route(self, request_id: str) -> Route:
        """Where the events of `request_id` will go (the route it already has, if any)."""
        route = self.routes.get(request_id)
        if route is None:
            route = self.routes[request_id] = Route(request_id, self.routes, self._recover, self._new_event)
        return route

    # -- events -------------------------------------------------------------------------

    async def _read_events(self) -> None:
        assert self.sub is not None
        receiver = self.sub.receiver
        bus = codec.topic_prefix(codec.BUS_TOPIC)
        decode = codec.decode_events
        routes = self.routes
        burst = 0
        while True:
            if self.reader_gate is not None:
                await self.reader_gate.wait()
            batch = receiver.ready_many()
            if not batch:
                burst = 0
                batch = await receiver.wait_many()
            else:
                burst += 1
                if burst >= 8:
                    # A long burst: let the consumers run before reading on.
                    burst = 0
                    await anyio.lowlevel.checkpoint()
            mine = codec.topic_prefix(self.client_id)  # a new one after a daemon restart
            cut = len(mine)
            for data in batch:
                try:
                    if data.startswith(mine):
                        events = decode(memoryview(data)[cut:])
                    elif data.startswith(bus):
                        if self._bus is not None or self._bus_for_routes:
                            self._deliver_bus(decode(memoryview(data)[len(bus) :]))
                        continue
                    else:
                        continue
                except codec.DecodeError:
                    continue
                for ev in events:
                    match ev:
                        case ProbeEvent():
                            if self._probe_seen is not None:
                                self._probe_seen.set()
                        case BusEvent():
                            pass  # only ever on the bus topic
                        case _:
                            route = routes.get(ev.request_id)
                            if route is not None:
                                route.deliver(ev)

    def _deliver_bus(self, events: list[Any]) -> None:
        for ev in events:
            if isinstance(ev, BusEvent):
                if self._bus is not None:
                    self._bus.send_nowait(ev)
                route = self.routes.get(ev.request_id)
                if route is not None and route.on_bus is not None:
                    route.on_bus(ev)

    async def listen_bus(self) -> None:
        """Subscribe to the bus for routes that watch their request's bus events (the
        retries a worker makes are announced there, and only there). nng filters on the
        subscriber's side, so this takes effect for the next message that arrives; a
        daemon that publishes the bus on demand is told first (our hello said we would
        not watch it)."""
        if self._bus_for_routes:
            return
        if self._bus is None and self.sub is not None:
            self.sub.subscribe(codec.topic_prefix(codec.BUS_TOPIC))
            if self.welcome is not None and self.welcome.bus_on_demand:
                await self.ask(WatchBus(client_id=self.client_id), WatchBusAck)
        self._bus_for_routes = True

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run `fn` in the connection's task group (a hook of the caller's, off the reader)."""
        if self._tg is not None:
            self._tg.start_soon(fn, *args)

    async def _watch_silence(self) -> None:
        """A request whose consumer has waited `silence_check_s` with nothing arriving may
        have lost its last events (its terminal one included), so no later event can
        reveal the gap: ask `replay`. One task for all requests, not a timeout per wait
        (a cancel scope per event cost the client a tenth of its CPU per request).

        The same task notices a lost control connection (a daemon killed or restarted,
        a network cut) within `nng.RESET_POLL_S`: the daemon cancels the requests of a
        connection that goes, so they fail here at once (their silence would take
        `silence_check_s` to notice, and the replay after it longer)."""
        silence = self._silence_check_s
        period = min(max(silence / 4, 0.01), nng.RESET_POLL_S)
        assert self.control is not None
        drops = self.control.drops
        while True:
            await anyio.sleep(period)
            if self.control.drops != drops:
                drops = self.control.drops
                self._connection_lost()
            now = time.monotonic()
            for route in list(self.routes.values()):
                since = route.waiting_since
                if since and now - since >= silence:
                    route.waiting_since = now  # then again after another silence
                    self._recover(route)

    def _connection_lost(self) -> None:
        for route in list(self.routes.values()):
            if not route.done:
                route.fail(
                    ErrorInfo(
                        error_class="unavailable",
                        retryable=True,
                        message=(
                            f"lost the connection to the trunkline daemon at {self.control_endpoint} (it stopped, "
                            "restarted or was cut off), which cancels the requests it was running; retry the request"
                        ),
                    )
                )

    def _recover(self, route: Route) -> None:
        if route.recovering or self._tg is None:
            return
        route.recovering = True
        self._tg.start_soon(self._replay, route)

    async def _replay(self, route: Route) -> None:
        """Fetch what this request's subscription missed, until nothing is missing."""
        try:
            while not route.done:
                result = await self.ask(Replay(request_id=route.request_id, from_seq=route.next_seq), ReplayResult)
                if result.state == "unknown":
                    route.fail(
                        ErrorInfo(
                            error_class="unavailable",
                            retryable=True,
                            message=("the daemon no longer knows this request (it restarted, or the request expired)"),
                        )
                    )
                    return
                if result.first_seq > route.next_seq:
                    route.skip_to(result.first_seq)
                before = route.next_seq
                for raw in result.events:
                    ev = codec.decode_event(raw)
                    if not isinstance(ev, (ProbeEvent, BusEvent)):  # a request's ring holds only its own events
                        route.deliver(ev)
                route.recovered += route.next_seq - before
                if not route.pending and (result.state == "running" or route.done):
                    return  # caught up; anything newer arrives as usual
                if not result.events:
                    return
        except (DaemonUnavailable, OSError) as exc:
            route.fail(ErrorInfo(error_class="unavailable", retryable=True, message=str(exc)))
        finally:
            route.recovering = False
