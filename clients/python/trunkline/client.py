"""The Python client: the trunkline protocol, for trio and asyncio programs alike.

    async with Client() as client:
        response = await client.complete("mock:echo", "hello")
        async with client.stream("mock:echo", "hello") as stream:
            async for text in stream.text_stream:
                print(text, end="")

`Client` is the API; its parts live beside it: the connection (its sockets, its
session, its events in order, `replay`) in `connection.py` and `routing.py`,
TLS in `tls.py`, the request forms it accepts in `request_builder.py`, model
lookups in `model_lookup.py`, and the stream it returns in `response_stream.py`.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from .autostart import plan as daemon_plan
from .autostart import start_and_connect
from .autostart import wanted as autostart_wanted
from .config.loader import default_runtime_dir
from .connection import Connection, not_open_error
from .errors import DaemonNotRunning, DaemonUnavailable, error_from_info
from .files import inline_local_files, max_file_bytes
from .middleware import chain_complete
from .model_lookup import find_model, newest
from .protocol.ids import request_id as new_request_id
from .protocol.messages import (
    UNKNOWN_CLIENT,
    Accepted,
    BusEvent,
    Cancel,
    CancelResult,
    CountTokens,
    ErrorEvent,
    Finish,
    ListModels,
    Message,
    ModelInfo,
    Models,
    Ready,
    ReadyResult,
    Rejected,
    Reload,
    ReloadResult,
    Replay,
    ReplayResult,
    Request,
    Response,
    StatusQuery,
    StatusReport,
    Submit,
    TokenCount,
    Welcome,
)
from .request_builder import build_request
from .response_stream import ResponseStream
from .retries import OnRetry, RetryWatcher
from .routing import Route
from .tls import ClientTLS
from .tracing import current_trace_context

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .fields import RequestFields


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
        autostart: bool | None = None,
        config: str | Path | None = None,
    ) -> None:
        self.runtime_dir = Path(runtime_dir).expanduser() if runtime_dir else default_runtime_dir()
        explicit = control_endpoint or os.environ.get("TRUNKLINE_CONTROL")
        self.control_endpoint = explicit or f"ipc://{self.runtime_dir / 'control.ipc'}"
        #: Start the daemon of `config` when none answers (default: TRUNKLINE_AUTOSTART=1);
        #: the client then finds it where that config puts it (see `trunkline.autostart`).
        self.autostart = autostart_wanted(autostart)
        #: The config file an autostarted daemon runs (default: TRUNKLINE_CONFIG, else
        #: ~/.config/trunkline/config.yaml when it exists).
        self.config = config
        self._endpoint_given = bool(explicit)
        self._runtime_dir_given = bool(runtime_dir)
        self.client_name = client_name
        self.token = token or os.environ.get("TRUNKLINE_TOKEN")
        self.timeout_s = timeout_s
        self.silence_check_s = silence_check_s
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
        self.watch_bus = watch_bus
        #: With `watch_bus=True`: the daemon's observability events (`llm.*`, `worker.*`).
        self.bus_events: MemoryObjectReceiveStream[BusEvent]
        self._bus_send, self.bus_events = anyio.create_memory_object_stream[BusEvent](math.inf)
        self._connection: Connection | None = None
        self._closed = False

    # -- connection ---------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        if self._closed:
            raise not_open_error(closed=True)
        if self._connection is not None:
            raise RuntimeError("this Client is connected already: enter its `async with` block once")
        if not self.autostart:
            self._connection = await self._connect()
            return self
        plan = daemon_plan(self.config, self.runtime_dir if self._runtime_dir_given else None)
        if not self._endpoint_given:
            self.control_endpoint = plan.control
        try:
            self._connection = await self._connect()
        except (DaemonNotRunning, DaemonUnavailable) as exc:
            if self.control_endpoint != plan.control:
                raise DaemonNotRunning(
                    f"{exc}; autostart starts the daemon of {plan.shown}, which answers at {plan.control}, "
                    f"not {self.control_endpoint}"
                ) from None
            self._connection = await start_and_connect(plan, self._connect)
        return self

    async def _connect(self) -> Connection:
        connection = Connection(
            self.control_endpoint,
            client_name=self.client_name,
            token=self.token,
            timeout_s=self.timeout_s,
            silence_check_s=self.silence_check_s,
            tls=ClientTLS(self.tls_ca_file, self.tls_cert_file, self.tls_key_file, self.tls_server_name),
            bus=self._bus_send if self.watch_bus else None,
        )
        await connection.connect()
        return connection

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._closed:
            return
        try:
            if self._connection is not None:
                await self._connection.close()  # says goodbye first if requests are running
        finally:
            self._closed = True

    @property
    def welcome(self) -> Welcome | None:
        """The daemon's answer to this client's (latest) hello."""
        return self._connection.welcome if self._connection is not None else None

    @property
    def client_id(self) -> str:
        """The id the daemon gave this client (a new one after a daemon restart)."""
        return self._connection.client_id if self._connection is not None else ""

    def _open(self) -> Connection:
        if self._connection is None or self._closed:
            raise not_open_error(self._closed)
        return self._connection

    # -- requests -------------------------------------------------------------------------

    async def submit(
        self,
        request: Request,
        *,
        stream: bool = True,
        request_id: str | None = None,
        operation_id: str | None = None,
        on_retry: OnRetry | None = None,
        client_key: str | None = None,
    ) -> tuple[Accepted, Route]:
        """Start a request; its events arrive on the returned route. `on_retry` is told
        of each retry the worker makes (see `trunkline.retries`). `client_key` names the
        client key the request is counted against; only the daemon's HTTP front door may
        set it (any other connection is refused)."""
        connection = self._open()
        if connection.reconnected:
            await connection.hello_again()
        rid = request_id or new_request_id()
        request = await self._read_local_files(request)
        route = connection.route(rid)
        if on_retry is not None:
            route.on_bus = RetryWatcher(on_retry, rid, connection.start_soon)
            await connection.listen_bus()
        submit = Submit(
            request_id=rid,
            client_id=connection.client_id,
            request=request,
            stream=stream,
            operation_id=operation_id,
            trace_context=current_trace_context(),
            client_key=client_key,
        )
        try:
            reply = await connection.call(submit)
            if isinstance(reply, Rejected) and reply.error.provider_code == UNKNOWN_CLIENT:
                # Sent before nng had reconnected to a restarted daemon: hello, then once more.
                await connection.hello_again(force=True)
                submit.client_id = connection.client_id
                reply = await connection.call(submit)
        except BaseException:
            connection.routes.pop(rid, None)
            raise
        if isinstance(reply, Rejected):
            connection.routes.pop(rid, None)
            raise error_from_info(reply.error, request_id=rid)
        if not isinstance(reply, Accepted):
            connection.routes.pop(rid, None)
            raise DaemonUnavailable(f"the daemon answered submit with {type(reply).__name__}")
        return reply, route

    async def _read_local_files(self, request: Request) -> Request:
        """`path` parts become base64 `data` here: the daemon never reads a client's files."""
        welcome = self.welcome
        limit = welcome.limits.max_message_bytes if welcome is not None else None
        return await inline_local_files(request, max_file_bytes(limit))

    async def complete(
        self,
        model: str | Request,
        messages: str | Message | Sequence[Message] | None = None,
        *,
        request_id: str | None = None,
        on_retry: OnRetry | None = None,
        **fields: Unpack[RequestFields],
    ) -> Response:
        """Run a request to the end and return its response (or raise its error).
        `on_retry(error, attempt, delay)` is called for each retry the worker makes."""
        request = build_request(model, messages, **fields)
        if not self.middleware:
            return await self._complete(request, request_id, on_retry)
        first = [request_id]

        async def innermost(request: Request) -> Response:
            rid = first.pop() if first else None  # a middleware calling twice sends twice
            return await self._complete(request, rid, on_retry)

        return await chain_complete(self.middleware, innermost)(request)

    async def _complete(self, request: Request, request_id: str | None, on_retry: OnRetry | None = None) -> Response:
        _, route = await self.submit(request, stream=False, request_id=request_id, on_retry=on_retry)
        try:
            while (ev := await route.next_event()) is not None:
                if isinstance(ev, Finish):
                    return ev.response
                if isinstance(ev, ErrorEvent):
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
        on_retry: OnRetry | None = None,
        **fields: Unpack[RequestFields],
    ) -> ResponseStream:
        """A streaming request: iterate it for events, `.text_stream` for text, `.response()` at the end.
        `on_retry(error, attempt, delay)` is called for each retry the worker makes before it streams."""
        return ResponseStream(self, build_request(model, messages, **fields), request_id, on_retry)

    async def cancel(self, request_id: str) -> bool:
        result = await self._open().ask(Cancel(request_id=request_id), CancelResult)
        return result.cancelled

    async def list_models(self, provider: str | None = None) -> list[ModelInfo]:
        result = await self._open().ask(ListModels(provider=provider), Models)
        return result.models

    async def get_model_info(self, model: str, provider: str | None = None) -> ModelInfo | None:
        """The entry `complete(model, ..., provider=provider)` would be served by: for any
        name it routes (a canonical id such as `anthropic:claude-sonnet-5-5`, an alias, a
        provider's own name, or `provider:name` for a model the catalog does not list,
        `in_catalog` false), with its limits, prices and `capabilities`. None when the
        daemon routes no such name."""
        result = await self._open().ask(ListModels(model=model, provider=provider), Models)
        if len(result.models) == 1:
            return result.models[0]
        return find_model(result.models, model)  # a daemon older than `model` sends the whole catalog

    async def latest_model(self, provider: str, capability: str | None = None) -> ModelInfo | None:
        """The newest model `provider` offers (the catalog lists each provider's newest
        first), optionally the newest with `capability`: one of CAPABILITIES. None when
        the provider has no such model."""
        return newest(await self.list_models(provider), provider, capability)

    async def status(self) -> StatusReport:
        return await self._open().ask(StatusQuery(), StatusReport)

    async def reload(self) -> ReloadResult:
        """Have the daemon read its config file and the catalog again (as SIGHUP does).
        A file that cannot be used is refused (`ok` false, `error` says why) and the
        running configuration stays."""
        return await self._open().ask(Reload(), ReloadResult)

    async def ready(self, model: str, provider: str | None = None) -> ReadyResult:
        return await self._open().ask(
            Ready(model=model, provider=provider), ReadyResult, timeout_s=max(self.timeout_s, 35.0), slow=True
        )

    async def count_tokens(
        self, model: str | Request, messages: str | Message | Sequence[Message] | None = None, **fields: Any
    ) -> TokenCount:
        request = await self._read_local_files(build_request(model, messages, **fields))
        reply = await self._open().call(CountTokens(request=request), slow=True)
        if isinstance(reply, Rejected):
            raise error_from_info(reply.error)
        if not isinstance(reply, TokenCount):
            raise DaemonUnavailable(f"the daemon answered count_tokens with {type(reply).__name__}")
        return reply

    async def replay(self, request_id: str, from_seq: int = 0) -> ReplayResult:
        return await self._open().ask(Replay(request_id=request_id, from_seq=from_seq), ReplayResult)


__all__ = ["Client", "ResponseStream", "build_request"]
