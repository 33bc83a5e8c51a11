"""A blocking client for scripts and notebooks: the async client on a private event loop."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from .client import Client, ResponseStream
from .protocol.messages import (
    Message,
    ModelInfo,
    ReadyResult,
    ReloadResult,
    Request,
    Response,
    StatusReport,
    StreamEvent,
    TokenCount,
)


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

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self._portal is None or self._client is None:
            raise RuntimeError("use SyncClient in a `with` block")
        return self._portal.call(lambda: fn(*args, **kwargs))

    def complete(self, model: str | Request, messages: str | Message | Sequence[Message] | None = None,
                 **fields: Any) -> Response:
        assert self._client is not None
        return self._call(self._client.complete, model, messages, **fields)  # type: ignore[no-any-return]

    def stream(self, model: str | Request, messages: str | Message | Sequence[Message] | None = None,
               **fields: Any) -> Iterator[StreamEvent]:
        """Yield events as they arrive; breaking out early cancels the request."""
        assert self._client is not None
        stream: ResponseStream = self._client.stream(model, messages, **fields)
        self._call(stream.start)
        finished = False
        try:
            while True:
                try:
                    event = self._call(stream.__anext__)
                except StopAsyncIteration:
                    finished = True
                    return
                yield event
        finally:
            if not finished and not stream.done:
                self._call(stream.cancel)

    def cancel(self, request_id: str) -> bool:
        assert self._client is not None
        return self._call(self._client.cancel, request_id)  # type: ignore[no-any-return]

    def list_models(self, provider: str | None = None) -> list[ModelInfo]:
        assert self._client is not None
        return self._call(self._client.list_models, provider)  # type: ignore[no-any-return]

    def status(self) -> StatusReport:
        assert self._client is not None
        return self._call(self._client.status)  # type: ignore[no-any-return]

    def reload(self) -> ReloadResult:
        assert self._client is not None
        return self._call(self._client.reload)  # type: ignore[no-any-return]

    def ready(self, model: str) -> ReadyResult:
        assert self._client is not None
        return self._call(self._client.ready, model)  # type: ignore[no-any-return]

    def count_tokens(self, model: str | Request, messages: str | Message | Sequence[Message] | None = None,
                     **fields: Any) -> TokenCount:
        assert self._client is not None
        return self._call(self._client.count_tokens, model, messages, **fields)  # type: ignore[no-any-return]
