"""Middleware: code that wraps every request a `Client` sends, for the concerns every
application repeats (logging, budgets, caches, rate limits).

    class Log(Middleware):
        async def complete(self, request, call_next):
            print("->", request.model)
            response = await call_next(request)
            print("<-", response.usage.total_tokens)
            return response

        async def stream(self, request, call_next):
            async for event in call_next(request):
                yield event

    Client(middleware=[Log(), Budget(2.0)])

The order is an onion: the request phase runs in registration order (the first
middleware sees the request first), the response phase in reverse (the first
sees the response last). A middleware may change the request it passes on,
change or replace the response, or not call `call_next` at all (a cache hit).
For a stream, `stream(request, call_next)` returns an async iterator of
events; `call_next(request)` is the inner one, and nothing is sent until it
is iterated. Either method may be left out (the call passes through); a plain
async function `fn(request, call_next)` is a `complete`-only middleware.
Everything above `Client.complete` and `Client.stream` (the tool loop,
`generate_object`) goes through the middleware, one step at a time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from .protocol.messages import Request, Response, StreamEvent

CompleteNext = Callable[[Request], Awaitable[Response]]
StreamNext = Callable[[Request], AsyncIterator[StreamEvent]]


class Middleware:
    """A base whose two hooks pass everything through; override either."""

    async def complete(self, request: Request, call_next: CompleteNext) -> Response:
        return await call_next(request)

    def stream(self, request: Request, call_next: StreamNext) -> AsyncIterator[StreamEvent]:
        return call_next(request)


def _hook(middleware: Any, name: str) -> Any:
    if isinstance(middleware, Middleware):
        if getattr(type(middleware), name) is getattr(Middleware, name):
            return None  # the base's pass-through: no needless layer
        return getattr(middleware, name)
    hook = getattr(middleware, name, None)
    if hook is None and name == "complete" and callable(middleware) and not hasattr(middleware, "stream"):
        return middleware  # a plain function
    return hook


def chain_complete(middleware: Sequence[Any], innermost: CompleteNext) -> CompleteNext:
    call = innermost
    for mw in reversed(middleware):
        hook = _hook(mw, "complete")
        if hook is not None:
            call = _bind(hook, call)
    return call


def chain_stream(middleware: Sequence[Any], innermost: StreamNext) -> StreamNext:
    call = innermost
    for mw in reversed(middleware):
        hook = _hook(mw, "stream")
        if hook is not None:
            call = _bind(hook, call)
    return call


def has_stream_hooks(middleware: Sequence[Any]) -> bool:
    return any(_hook(mw, "stream") is not None for mw in middleware)


def _bind(hook: Any, call_next: Any) -> Any:
    return lambda request: hook(request, call_next)


__all__ = ["CompleteNext", "Middleware", "StreamNext", "chain_complete", "chain_stream"]
