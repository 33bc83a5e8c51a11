"""`Client.stream`'s result: one streaming request's events, its text, its response."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING

import anyio

from .errors import DaemonUnavailable, error_from_info
from .middleware import chain_stream, has_stream_hooks
from .protocol.accumulate import StreamAccumulator
from .protocol.ids import request_id as new_request_id
from .protocol.messages import Accepted, Request, Response, StreamEvent, TextDelta

if TYPE_CHECKING:
    from .client import Client
    from .retries import OnRetry
    from .routing import Route


class ResponseStream:
    """One streaming request. Submitted when entered (or first iterated); leaving the
    `async with` block before the end cancels the request."""

    def __init__(
        self, client: Client, request: Request, request_id: str | None, on_retry: OnRetry | None = None
    ) -> None:
        self.client = client
        self.on_retry = on_retry
        self.request = request
        self.request_id = request_id or new_request_id()
        self.accepted: Accepted | None = None
        self.accumulator = StreamAccumulator()
        self._route: Route | None = None
        self._started = False
        self._chain: AsyncIterator[StreamEvent] | None = None  # the events through the client's middleware

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

    async def _submit(self, request: Request) -> Route:
        self.request = request
        self.accepted, self._route = await self.client.submit(
            request, stream=True, request_id=self.request_id, on_retry=self.on_retry
        )
        self.accumulator = StreamAccumulator(self.accepted.provider)
        return self._route

    async def _submitted(self, request: Request) -> AsyncIterator[StreamEvent]:
        if self._route is not None:
            raise RuntimeError("a middleware called call_next twice for one stream")
        route = await self._submit(request)
        while (ev := await route.next_event()) is not None:
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
                aclose = getattr(self._chain, "aclose", None)  # a middleware may return any async iterator
                if aclose is not None:
                    await aclose()
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
            return ev
        if self.accumulator.done:
            raise StopAsyncIteration
        assert self._route is not None
        event = await self._route.next_event()
        if event is None:
            raise StopAsyncIteration
        self.accumulator.feed(event)
        return event

    @property
    def done(self) -> bool:
        return self.accumulator.done

    @property
    def partial_response(self) -> Response | None:
        """The response so far (the whole one once the stream has ended); None before the
        request was submitted. Its text, reasoning and tool calls are those of the events
        already taken from the stream."""
        if not self._started:
            return None
        return self.accumulator.response()

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
            if isinstance(ev, TextDelta):
                yield ev.text
        acc = self.accumulator
        if acc.error is not None:
            raise error_from_info(acc.error, acc.partial, self.request_id)

    async def cancel(self) -> bool:
        return await self.client.cancel(self.request_id)
