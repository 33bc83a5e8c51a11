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

import contextlib
import difflib
import math
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream

from .config.loader import default_runtime_dir
from .errors import DaemonNotRunning, DaemonUnavailable, TLSError, TrunklineError, error_from_info
from .files import inline_local_files, max_file_bytes
from .middleware import chain_complete, chain_stream, has_stream_hooks
from .protocol import codec, nng
from .protocol.accumulate import StreamAccumulator
from .protocol.ids import request_id as new_request_id
from .protocol.messages import (
    UNKNOWN_CLIENT,
    Accepted,
    BusEvent,
    Cancel,
    CancelResult,
    CountTokens,
    ErrorEvent,
    ErrorInfo,
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
    Reload,
    ReloadResult,
    Replay,
    ReplayResult,
    Request,
    Response,
    ResponseFormat,
    StatusQuery,
    StatusReport,
    StreamEvent,
    Submit,
    TextDelta,
    Timeouts,
    TokenCount,
    Welcome,
)
from .tls_check import handshake_problem
from .tracing import current_trace_context

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .fields import RequestFields

PROBE_INTERVAL_S = 0.05


#: What `latest_model(provider, capability)` may ask for: ModelInfo's capability flags.
CAPABILITIES = ("tools", "vision", "reasoning", "structured_output", "streaming")


def _tls_refused(exc: BaseException) -> bool:
    """A failed TLS handshake (as opposed to nothing listening)."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(word in text for word in ("crypto", "auth", "certificate", "peer"))


def _closed_early(exc: BaseException) -> bool:
    """The peer closed a plain connection during nng's own handshake: what a TLS
    endpoint does with a client that does not start TLS."""
    text = f"{type(exc).__name__} {exc}".lower()
    return "shutdown" in text or "closed" in text or "reset" in text


def _tls_hint(url: str) -> str:
    """For a plain tcp endpoint: the daemon may be listening with TLS there."""
    head, _, rest = url.partition("://")
    if head not in ("tcp", "tcp4", "tcp6"):
        return ""
    return f"; the daemon may expect TLS (tls+{head}://{rest}, with the CA that signed its certificate)"


def find_model(models: Sequence[ModelInfo], model: str) -> ModelInfo | None:
    for info in models:
        if info.id == model:
            return info
    for info in models:
        if model in info.aliases:
            return info
    return None


def newest(models: Sequence[ModelInfo], provider: str, capability: str | None) -> ModelInfo | None:
    if capability is not None and capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r}; use one of {', '.join(CAPABILITIES)}")
    for info in models:
        if info.provider == provider and info.in_catalog and (capability is None or getattr(info, capability)):
            return info
    return None


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
    if base.get("tools"):
        base["tools"] = [_plain_tool(t) for t in base["tools"]]
    if "tool_choice" in base:
        base["tool_choice"] = _plain_tool_choice(base["tool_choice"])
    plain = msgspec.to_builtins(base)
    _check_fields(plain, Request, "")
    fmt = plain.get("response_format")
    if isinstance(fmt, dict):
        plain["response_format"] = _response_format(fmt)
    _check_fields(plain.get("response_format"), ResponseFormat, "response_format.")
    _check_fields(plain.get("timeouts"), Timeouts, "timeouts.")
    try:
        # Plain dicts are welcome anywhere (tools, parts, options): convert checks them.
        return msgspec.convert(plain, Request)
    except msgspec.ValidationError as exc:
        raise TypeError(f"invalid request: {exc}") from None


def _check_fields(value: Any, struct: type[msgspec.Struct], where: str) -> None:
    """A misspelt field must not be dropped silently (msgspec ignores unknown keys):
    refuse it, naming the nearest valid one."""
    if not isinstance(value, dict):
        return
    names = struct.__struct_fields__
    for key in value:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
            hint = f"; did you mean `{where}{close[0]}`?" if close else f"; valid: {', '.join(names)}"
            raise TypeError(f"unknown request field `{where}{key}`{hint}")


def _response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's spelling (`{"type": "json_object"}`, `{"type": "json_schema", "json_schema":
    {"name", "schema", "strict"}}`) is taken as ours (`kind`, `schema`, `name`, `strict`)."""
    if "type" not in fmt or "kind" in fmt:
        return fmt
    out = {k: v for k, v in fmt.items() if k not in ("type", "json_schema")}
    out["kind"] = fmt["type"]
    inner = fmt.get("json_schema")
    if isinstance(inner, dict):
        for key in ("name", "schema", "strict"):
            if key in inner:
                out[key] = inner[key]
    return out


def _messages(messages: str | Message | Sequence[Message | dict[str, Any]]) -> list[Any]:
    if isinstance(messages, str):
        return [Message.user(messages)]
    if isinstance(messages, Message):
        return [messages]
    return [_plain_message(m) if isinstance(m, dict) else m for m in messages]


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    """The form OpenAI and LiteLLM users write: `{"role": "user", "content": "hi"}`
    (string content becomes a text part; a `tool` message's string is its result)."""
    content = message.get("content")
    if isinstance(content, str):
        message = dict(message)
        if message.get("role") == "tool" and message.get("tool_call_id"):
            message["content"] = [{"type": "tool_result", "tool_call_id": message["tool_call_id"], "content": content}]
        else:
            message["content"] = [{"type": "text", "text": content}] if content else []
    return message


def _plain_tool(tool: Any) -> Any:
    """A plain function becomes an active tool (its schema from its hints and docstring);
    OpenAI's `{"type": "function", "function": {...}}` becomes our field dict. A dict of
    our own fields goes as it is: the daemon checks it, as it checks every request."""
    from .tools import tool as make_tool
    from .tools import tool_fields

    if isinstance(tool, dict):
        return tool_fields(tool)
    if callable(tool) and not isinstance(tool, msgspec.Struct):
        return make_tool(tool)
    return tool


def _plain_tool_choice(choice: Any) -> Any:
    """`"auto"`, `"none"`, `"required"` (or OpenAI's `"any"`), a tool's name, or OpenAI's
    `{"type": "function", "function": {"name": ...}}`."""
    if isinstance(choice, str):
        if choice in ("auto", "none", "required"):
            return {"mode": choice}
        if choice == "any":
            return {"mode": "required"}
        return {"mode": "tool", "name": choice}
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function") or {}
        return {"mode": "tool", "name": function.get("name") or choice.get("name")}
    return choice


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
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        tls_server_name: str | None = None,
        middleware: Sequence[Any] = (),
    ) -> None:
        self.runtime_dir = Path(runtime_dir).expanduser() if runtime_dir else default_runtime_dir()
        self.control_endpoint = (
            control_endpoint or os.environ.get("TRUNKLINE_CONTROL") or f"ipc://{self.runtime_dir / 'control.ipc'}"
        )
        self.client_name = client_name
        self.token = token or os.environ.get("TRUNKLINE_TOKEN")
        self.timeout_s = timeout_s
        self.silence_check_s = silence_check_s
        self.client_id = ""
        self.welcome: Welcome | None = None
        #: For `tls+tcp://` endpoints: the CA that signed the daemon's certificate (the
        #: server is verified), and optionally this client's own certificate and key.
        self.tls_ca_file = tls_ca_file or os.environ.get("TRUNKLINE_TLS_CA_FILE")
        self.tls_cert_file = tls_cert_file
        self.tls_key_file = tls_key_file
        #: The name the daemon's certificate must carry; the endpoint's host when unset.
        self.tls_server_name = tls_server_name or os.environ.get("TRUNKLINE_TLS_SERVER_NAME")
        #: Wraps every `complete` and `stream` (see `trunkline.middleware`): the request
        #: phase in this order, the response phase in reverse.
        self.middleware = list(middleware)
        self._control: nng.Requester | None = None
        self._sub: nng.Subscriber | None = None
        self._hello_at = 0  # the control socket's connection count when we said hello
        self._rehello_lock = anyio.Lock()
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

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _connect(self) -> None:
        try:
            nng.check_url(self.control_endpoint)
        except ValueError as exc:
            raise DaemonNotRunning(str(exc)) from None
        path = nng.ipc_path(self.control_endpoint)
        if path is not None and not path.exists():
            raise DaemonNotRunning(
                f"no trunkline daemon is running (no socket at {path}); start one with "
                "`trunkline serve`, or point TRUNKLINE_RUNTIME_DIR at its runtime directory"
            )
        tls = self._tls(self.control_endpoint)
        try:
            # Dialling waits for the connection (and a TLS handshake): off the event loop.
            self._control = await anyio.to_thread.run_sync(nng.Requester, self.control_endpoint, tls)
        except (OSError, nng.NNGException) as exc:
            if nng.is_tls(self.control_endpoint) and _tls_refused(exc):
                # Something answered and the handshake failed: a daemon runs, and this
                # client does not trust it (or it is not the one named).
                raise await self._handshake_failed(self.control_endpoint, exc) from None
            if _closed_early(exc) and _tls_hint(self.control_endpoint):
                raise DaemonNotRunning(
                    f"{self.control_endpoint} closed the connection before a daemon answered "
                    f"({exc}){_tls_hint(self.control_endpoint)}"
                ) from None
            raise DaemonNotRunning(
                f"no trunkline daemon answers at {self.control_endpoint} ({exc}); start one with `trunkline serve`"
            ) from None
        try:
            self._hello_at = self._control.connects
            try:
                welcome = await self._call(Hello(client_name=self.client_name, token=self.token), timeout_s=10.0)
            except DaemonUnavailable as exc:
                raise DaemonUnavailable(f"{exc}{_tls_hint(self.control_endpoint)}") from None
            assert type(welcome) is Welcome
            self.welcome = welcome
            self.client_id = welcome.client_id
            topics = (codec.topic_prefix(self.client_id),)
            if self.watch_bus:
                topics += (codec.topic_prefix(codec.BUS_TOPIC),)
            url = event_url(welcome.event_endpoint, self.control_endpoint)
            try:
                self._sub = await anyio.to_thread.run_sync(nng.Subscriber, url, topics, self._tls(url))
            except (OSError, nng.NNGException) as exc:
                if nng.is_tls(url) and _tls_refused(exc):
                    raise await self._handshake_failed(url, exc) from None
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

    def _not_open(self) -> RuntimeError:
        if self._closed:
            return RuntimeError(
                "this Client is closed (its `async with` block has ended); open another with "
                "`async with Client() as client:`"
            )
        return RuntimeError(
            "this Client is not connected: use it as `async with Client() as client:` (the block "
            "connects to the daemon and closes the connection at its end)"
        )

    async def _hello_again(self, force: bool = False) -> None:
        """Our control connection was made anew since our hello: the daemon restarted
        (or the connection dropped, and the daemon let our client id go with it). Say
        hello on it, subscribe to the new client id, and probe, once for all callers."""
        assert self._control is not None
        assert self._sub is not None
        async with self._rehello_lock:
            if self._control.connects == self._hello_at and not force:
                return
            self._hello_at = self._control.connects
            welcome = await self._call(Hello(client_name=self.client_name, token=self.token), timeout_s=10.0)
            assert type(welcome) is Welcome
            self.welcome = welcome
            self.client_id = welcome.client_id
            self._sub.subscribe(codec.topic_prefix(self.client_id))
            self._probe_seen = anyio.Event()
            await self._probe()

    def _tls(self, url: str) -> Any:
        if not nng.is_tls(url):
            return None
        if not self.tls_ca_file:
            # nng's TLS has no system store: without a CA nothing would be verified.
            raise TLSError(
                f"{url} is a TLS endpoint: give the CA that signed the daemon's certificate "
                "(Client(tls_ca_file=...), --tls-ca-file or TRUNKLINE_TLS_CA_FILE)"
            )
        try:
            return nng.client_tls(
                self.tls_ca_file, self.tls_cert_file, self.tls_key_file, self.tls_server_name or host_of(url)
            )
        except OSError as exc:
            raise TLSError(
                f"cannot read the TLS files for {url} ({exc.filename or self.tls_ca_file}: {exc.strerror or exc})"
            ) from None
        except (ValueError, nng.NNGException) as exc:
            raise TLSError(
                f"cannot set up TLS for {url}: the CA file {self.tls_ca_file} (or the client's certificate "
                f"and key) holds nothing nng can read as a PEM certificate ({exc})"
            ) from None

    async def _handshake_failed(self, url: str, exc: BaseException) -> TLSError:
        """The error for a failed handshake, naming its cause when `ssl` can tell it."""
        name = self.tls_server_name or host_of(url)
        assert self.tls_ca_file is not None
        why = await anyio.to_thread.run_sync(handshake_problem, host_of(url), port_of(url), self.tls_ca_file, name)
        if why is None:
            why = (
                f"this client could not verify the daemon's certificate as one for {name!r} signed by the CA in "
                f"{self.tls_ca_file}; check tls_ca_file (--tls-ca-file, TRUNKLINE_TLS_CA_FILE) and tls_server_name "
                "(--tls-server-name, TRUNKLINE_TLS_SERVER_NAME)"
            )
        return TLSError(f"the TLS handshake with {url} failed ({exc}): {why}")

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
        try:
            if self._control is not None and self.client_id and any(not r.done for r in self._routes.values()):
                # Closing the connection cancels them as well, should the goodbye fail.
                with contextlib.suppress(DaemonUnavailable, OSError, TrunklineError):
                    await self._call(Goodbye(client_id=self.client_id), timeout_s=2.0)
        finally:
            self._closed = True  # from here on, a call says the client is closed
            await self._teardown()

    async def _teardown(self) -> None:
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            self._tg = None
        for route in list(self._routes.values()):
            route.fail(ErrorInfo(error_class="cancelled", message="the client was closed"))
        if self._sub is not None:
            self._sub.close()
        if self._control is not None:
            self._control.close()

    async def _call(self, msg: Any, timeout_s: float | None = None, slow: bool = False) -> Any:
        """One control round trip. Any number may be in flight; a slow one (`ready`,
        `count_tokens`) never holds up the others."""
        if self._control is None or self._closed:
            raise self._not_open()
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
            with anyio.fail_after(limit):
                raw = await self._control.call(data, slow)
        except TimeoutError:
            raise DaemonUnavailable(f"the trunkline daemon did not answer within {limit:g}s") from None
        except (nng.NNGException, OSError) as exc:
            raise DaemonUnavailable(f"lost the trunkline daemon at {self.control_endpoint} ({exc})") from None
        reply = codec.decode_control_reply(raw)
        if type(reply) is ProtocolError:
            raise error_from_info(reply.error)
        return reply

    async def _read_events(self) -> None:
        assert self._sub is not None
        receiver = self._sub.receiver
        bus = codec.topic_prefix(codec.BUS_TOPIC)
        decode = codec.decode_events
        routes = self._routes
        burst = 0
        while True:
            if self.reader_gate is not None:
                await self.reader_gate.wait()
            batch = receiver.ready_many()
            if not batch:
                burst = 0
                batch = await receiver.recv_many()
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
                        for ev in decode(memoryview(data)[len(bus) :]):
                            self._bus_send.send_nowait(ev)
                        continue
                    else:
                        continue
                except codec.DecodeError:
                    continue
                for ev in events:
                    route = routes.get(ev.request_id)
                    if route is not None:
                        route.deliver(ev)
                    elif type(ev) is ProbeEvent and self._probe_seen is not None:
                        self._probe_seen.set()

    async def _watch_silence(self) -> None:
        """A request whose consumer has waited `silence_check_s` with nothing arriving may
        have lost its last events (its terminal one included), so no later event can
        reveal the gap: ask `replay`. One task for all requests, not a timeout per wait
        (a cancel scope per event cost the client a tenth of its CPU per request).

        The same task notices a lost control connection (a daemon killed or restarted,
        a network cut) within `nng.RESET_POLL_S`: the daemon cancels the requests of a
        connection that goes, so they fail here at once (their silence would take
        `silence_check_s` to notice, and the replay after it longer)."""
        period = min(max(self.silence_check_s / 4, 0.01), nng.RESET_POLL_S)
        assert self._control is not None
        drops = self._control.drops
        while True:
            await anyio.sleep(period)
            if self._control.drops != drops:
                drops = self._control.drops
                self._connection_lost()
            now = time.monotonic()
            for route in list(self._routes.values()):
                since = route.waiting_since
                if since and now - since >= self.silence_check_s:
                    route.waiting_since = now  # then again after another silence
                    self._recover(route)

    def _connection_lost(self) -> None:
        for route in list(self._routes.values()):
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

    async def submit(
        self, request: Request, *, stream: bool = True, request_id: str | None = None, operation_id: str | None = None
    ) -> tuple[Accepted, _Route]:
        """Start a request; its events arrive on the returned route."""
        if self._control is None or self._closed:
            raise self._not_open()
        if self._control.connects != self._hello_at:
            await self._hello_again()
        rid = request_id or new_request_id()
        request = await self._read_local_files(request)
        route = self._routes.get(rid) or _Route(self, rid)
        self._routes[rid] = route
        submit = Submit(
            request_id=rid,
            client_id=self.client_id,
            request=request,
            stream=stream,
            operation_id=operation_id,
            trace_context=current_trace_context(),
        )
        try:
            reply = await self._call(submit)
            if type(reply) is Rejected and reply.error.provider_code == UNKNOWN_CLIENT:
                # Sent before nng had reconnected to a restarted daemon: hello, then once more.
                await self._hello_again(force=True)
                submit.client_id = self.client_id
                reply = await self._call(submit)
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

    async def complete(
        self,
        model: str | Request,
        messages: str | Message | Sequence[Message] | None = None,
        *,
        request_id: str | None = None,
        **fields: Unpack[RequestFields],
    ) -> Response:
        """Run a request to the end and return its response (or raise its error)."""
        request = build_request(model, messages, **fields)
        if not self.middleware:
            return await self._complete(request, request_id)
        first = [request_id]

        async def innermost(request: Request) -> Response:
            rid = first.pop() if first else None  # a middleware calling twice sends twice
            return await self._complete(request, rid)

        return await chain_complete(self.middleware, innermost)(request)

    async def _complete(self, request: Request, request_id: str | None) -> Response:
        _, route = await self.submit(request, stream=False, request_id=request_id)
        try:
            while (ev := await self._next_event(route)) is not None:
                if type(ev) is Finish:
                    return ev.response
                if type(ev) is ErrorEvent:
                    raise error_from_info(ev.error, ev.partial, route.request_id)
        except BaseException:
            # Cancelled (or the caller's deadline passed): the daemon stops too.
            if not route.done:
                with anyio.CancelScope(shield=True):
                    with contextlib.suppress(DaemonUnavailable, OSError):
                        await self.cancel(route.request_id)
            raise
        raise DaemonUnavailable("the request ended without a terminal event")  # pragma: no cover

    def stream(
        self,
        model: str | Request,
        messages: str | Message | Sequence[Message] | None = None,
        *,
        request_id: str | None = None,
        **fields: Unpack[RequestFields],
    ) -> ResponseStream:
        """A streaming request: iterate it for events, `.text_stream` for text, `.response()` at the end."""
        return ResponseStream(self, build_request(model, messages, **fields), request_id)

    async def cancel(self, request_id: str) -> bool:
        result: CancelResult = await self._call(Cancel(request_id=request_id))
        return result.cancelled

    async def list_models(self, provider: str | None = None) -> list[ModelInfo]:
        result: Models = await self._call(ListModels(provider=provider))
        return result.models

    async def get_model_info(self, model: str) -> ModelInfo | None:
        """The catalog's entry for `model` (a canonical id such as `anthropic:claude-sonnet-5-5`,
        or an alias), None when the daemon knows no such model."""
        return find_model(await self.list_models(), model)

    async def latest_model(self, provider: str, capability: str | None = None) -> ModelInfo | None:
        """The newest model `provider` offers (the catalog lists each provider's newest
        first), optionally the newest with `capability`: one of CAPABILITIES. None when
        the provider has no such model."""
        return newest(await self.list_models(provider), provider, capability)

    async def status(self) -> StatusReport:
        return await self._call(StatusQuery())  # type: ignore[no-any-return]

    async def reload(self) -> ReloadResult:
        """Have the daemon read its config file and the catalog again (as SIGHUP does).
        A file that cannot be used is refused (`ok` false, `error` says why) and the
        running configuration stays."""
        return await self._call(Reload())  # type: ignore[no-any-return]

    async def ready(self, model: str, provider: str | None = None) -> ReadyResult:
        return await self._call(
            Ready(model=model, provider=provider),  # type: ignore[no-any-return]
            timeout_s=max(self.timeout_s, 35.0),
            slow=True,
        )

    async def count_tokens(
        self, model: str | Request, messages: str | Message | Sequence[Message] | None = None, **fields: Any
    ) -> TokenCount:
        request = await self._read_local_files(build_request(model, messages, **fields))
        reply = await self._call(CountTokens(request=request), slow=True)
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
        self._chain: AsyncIterator[Any] | None = None  # the events through the client's middleware

    async def start(self) -> ResponseStream:
        if not self._started:
            self._started = True
            if has_stream_hooks(self.client.middleware):
                # Submitted when the innermost iterator is first pulled, with the
                # request as the middleware left it (a cache hit never submits).
                self._chain = chain_stream(self.client.middleware, self._submitted)(self.request)
            else:
                await self._submit(self.request)
        return self

    async def _submit(self, request: Request) -> None:
        self.request = request
        self.accepted, self._route = await self.client.submit(request, stream=True, request_id=self.request_id)
        self.accumulator = StreamAccumulator(self.accepted.provider)

    async def _submitted(self, request: Request) -> AsyncIterator[Any]:
        if self._route is not None:
            raise RuntimeError("a middleware called call_next twice for one stream")
        await self._submit(request)
        assert self._route is not None
        while (ev := await self.client._next_event(self._route)) is not None:
            yield ev

    async def __aenter__(self) -> ResponseStream:
        return await self.start()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._chain is not None:
            with anyio.CancelScope(shield=True):
                if et is None and self.accumulator.done:
                    async for _ in self._chain:  # the middleware's response phase, after the end
                        pass
                await self._chain.aclose()  # type: ignore[attr-defined]
        if self._route is not None and not self.accumulator.done:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(DaemonUnavailable, OSError):
                    await self.client.cancel(self.request_id)

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> StreamEvent:
        await self.start()
        if self._chain is not None:
            # Pulled to its end even past the terminal event: the middleware's
            # response phase runs after its loop.
            ev = await self._chain.__anext__()
            if not self.accumulator.done:
                self.accumulator.feed(ev)
            return ev  # type: ignore[no-any-return]
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


def host_of(url: str) -> str:
    """The host part of a network endpoint URL (brackets of an IPv6 address removed)."""
    rest = url.partition("://")[2]
    if rest.startswith("["):
        return rest[1 : rest.index("]")]
    return rest.rpartition(":")[0] if ":" in rest else rest


def port_of(url: str) -> int:
    """The port of a network endpoint URL (0 when it has none)."""
    port = url.partition("://")[2].rpartition(":")[2]
    return int(port) if port.isdigit() else 0


def event_url(announced: str, control: str) -> str:
    """The event endpoint to dial: as the daemon announced it, except that a wildcard
    listening address (`0.0.0.0`, `::`, `*`) is replaced by the host the control
    endpoint was reached at."""
    head, sep, rest = announced.partition("://")
    if not sep or nng.ipc_path(announced) is not None:
        return announced
    host, colon, port = rest.rpartition(":")
    if colon and host.strip("[]") in ("0.0.0.0", "::", "*", ""):
        control_host = host_of(control)
        if ":" in control_host:
            control_host = f"[{control_host}]"
        return f"{head}://{control_host}:{port}"
    return announced


__all__ = ["Client", "ResponseStream", "build_request"]
