"""A blocking client for scripts and notebooks: the async client on a private event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

import msgspec
import trio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from .client import Client
from .generation import generate, stream
from .protocol.messages import (
    Message,
    ModelInfo,
    ReadyResult,
    ReloadResult,
    Request,
    Response,
    StatusReport,
    TextDelta,
    TokenCount,
)
from .results import GenerateResult, ObjectResult
from .structured import generate_object, stream_object

P = ParamSpec("P")
T = TypeVar("T")


def _running_loop() -> str | None:
    """The event loop running in this thread, if any."""
    try:
        trio.lowlevel.current_trio_token()
        return "trio"
    except RuntimeError:
        pass
    try:
        asyncio.get_running_loop()
        return "asyncio"
    except RuntimeError:
        return None


def _refuse_inside_a_loop() -> None:
    """A blocking call made from an event loop's own thread would stop that loop until
    it returns (anyio refuses it, and its portal then never closes): say so at once."""
    loop = _running_loop()
    if loop is not None:
        to_thread = "trio.to_thread.run_sync" if loop == "trio" else "asyncio.to_thread"
        article = "a" if loop == "trio" else "an"
        raise RuntimeError(
            f"SyncClient blocks the thread it is called from, and this thread runs {article} {loop} event loop: in "
            "async code use `async with Client() as client:` and `await client.complete(...)` (or run the blocking "
            f"code in a worker thread with `{to_thread}`)"
        )


def _not_connected() -> RuntimeError:
    return RuntimeError(
        "this SyncClient is not connected: use it as `with SyncClient() as client:` (the block "
        "connects to the daemon and closes the connection at its end)"
    )


class SyncStream:
    """A high-level stream driven from blocking code, one item per call into the loop."""

    def __init__(self, owner: SyncClient, items: Any, closer: Any, result: Any) -> None:
        self._owner = owner
        self._items = items
        self._closer = closer
        self._result = result
        self._finished = False

    def __enter__(self) -> SyncStream:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        try:
            while True:
                try:
                    item = self._owner._call(self._items.__anext__)
                except StopAsyncIteration:
                    self._finished = True
                    return
                yield item
        finally:
            if not self._finished:
                self.close()

    def close(self) -> None:
        """Cancel what is still running (nothing, once the stream has ended)."""
        if self._owner._portal is not None:
            self._owner._call(self._closer.aclose)

    @property
    def partial_response(self) -> Response | None:
        """The response of the step under way, so far (see `GenerateStream.partial_response`).
        Read between items: the stream's state only changes while an item is being taken."""
        return getattr(self._closer, "partial_response", None)

    @property
    def text_stream(self) -> Iterator[str]:
        for item in self:
            if type(item) is TextDelta:
                yield item.text
        self.result()  # raises the error that ended the stream, if one did

    def result(self) -> Any:
        return self._owner._call(self._result)

    def response(self) -> Response:
        """The final response, as `Client.stream(...).response()` gives it (the last
        step's, for a loop that ran tools)."""
        result = self.result()
        response: Response = getattr(result, "response", result)
        return response


class SyncClient:
    """`with SyncClient() as client: print(client.complete("mock:echo", "hi").text)`"""

    def __init__(self, runtime_dir: str | Path | None = None, **options: Any) -> None:
        self._options = options
        self._runtime_dir = runtime_dir
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._client: Client | None = None
        self._client_cm: AbstractContextManager[Client] | None = None

    def __enter__(self) -> SyncClient:
        _refuse_inside_a_loop()
        self._portal_cm = start_blocking_portal(backend="trio")
        self._portal = self._portal_cm.__enter__()
        client = Client(self._runtime_dir, **self._options)
        # The client's task group must be entered and left by one task: the portal
        # keeps the whole `async with` inside a task of its own.
        self._client_cm = self._portal.wrap_async_context_manager(client)
        try:
            self._client = self._client_cm.__enter__()
        except BaseException:
            self._portal_cm.__exit__(None, None, None)
            self._portal = self._portal_cm = None
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._client_cm is not None:
            self._client_cm.__exit__(None, None, None)
            self._client_cm = None
        if self._portal_cm is not None:
            self._portal_cm.__exit__(None, None, None)
        self._portal = self._portal_cm = self._client = None

    @property
    def _open(self) -> Client:
        """The async client underneath, once the `with` block has connected it."""
        if self._portal is None or self._client is None:
            raise _not_connected()
        return self._client

    def _call(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        portal = self._portal
        if portal is None or self._client is None:
            raise _not_connected()
        _refuse_inside_a_loop()
        return portal.call(lambda: fn(*args, **kwargs))

    def complete(
        self, model: str | Request, messages: str | Message | Sequence[Message] | None = None, **fields: Any
    ) -> Response:
        return self._call(self._open.complete, model, messages, **fields)

    def stream(
        self, model: str | Request, prompt: str | Message | Sequence[Message] | None = None, **options: Any
    ) -> SyncStream:
        """`trunkline.stream`, blocking: iterate it for the events of every step (breaking
        out early cancels the request and any running tools); `.text_stream`, `.result()`.
        A `Request` is sent as it is (its messages, tools and fields)."""
        client = self._open
        if isinstance(model, Request):
            base = {k: v for k, v in msgspec.structs.asdict(model).items() if k not in ("model", "messages")}
            options = {**base, **options}
            if prompt is None:
                prompt = model.messages
            model = model.model
        if prompt is not None and not isinstance(prompt, (str, Message)):
            options["messages"], prompt = list(prompt), None
        generating = stream(model, prompt, client=client, **options)
        return SyncStream(self, generating, generating, generating.result)

    def generate(self, model: str, prompt: str | Message | None = None, **options: Any) -> GenerateResult:
        """`trunkline.generate`, blocking; the same arguments."""
        return self._call(generate, model, prompt, client=self._open, **options)

    def generate_object(
        self, model: str, prompt: str | Message | None = None, *, schema: Any, **options: Any
    ) -> ObjectResult:
        """`trunkline.generate_object`, blocking; the same arguments."""
        return self._call(generate_object, model, prompt, schema=schema, client=self._open, **options)

    def stream_object(
        self, model: str, prompt: str | Message | None = None, *, schema: Any, **options: Any
    ) -> SyncStream:
        """`trunkline.stream_object`, blocking: iterate it for partial objects; `.result()`
        for the validated one."""
        objects = stream_object(model, prompt, schema=schema, client=self._open, **options)
        return SyncStream(self, aiter(objects), objects.events, objects.result)

    def cancel(self, request_id: str) -> bool:
        return self._call(self._open.cancel, request_id)

    def list_models(self, provider: str | None = None) -> list[ModelInfo]:
        return self._call(self._open.list_models, provider)

    def get_model_info(self, model: str, provider: str | None = None) -> ModelInfo | None:
        """As `Client.get_model_info`."""
        return self._call(self._open.get_model_info, model, provider)

    def latest_model(self, provider: str, capability: str | None = None) -> ModelInfo | None:
        """As `Client.latest_model`."""
        return self._call(self._open.latest_model, provider, capability)

    def status(self) -> StatusReport:
        return self._call(self._open.status)

    def reload(self) -> ReloadResult:
        return self._call(self._open.reload)

    def ready(self, model: str) -> ReadyResult:
        return self._call(self._open.ready, model)

    def count_tokens(
        self, model: str | Request, messages: str | Message | Sequence[Message] | None = None, **fields: Any
    ) -> TokenCount:
        return self._call(self._open.count_tokens, model, messages, **fields)
