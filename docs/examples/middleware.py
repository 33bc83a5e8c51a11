"""Three small middleware: logging, a cost budget, and a cache keyed by the request.

    from trunkline import Client
    from middleware import CostBudget, LoggingMiddleware, RequestCache

    async with Client(middleware=[LoggingMiddleware(), CostBudget(limit_usd=5.0), RequestCache()]) as client:
        ...

Order matters (an onion: requests go through the list in order, responses come
back through it in reverse). Above, the log sees every call, cached or not; the
budget is checked before the cache, so once it is spent even a cached answer is
refused; put the cache first to let cached answers through a spent budget
(they cost nothing). Each works for `complete` and for streams, and so for
everything built on them (`generate`, tool loops, `generate_object`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from trunkline import Middleware
from trunkline.protocol.messages import Finish, Request, Response

log = logging.getLogger("trunkline.requests")


class LoggingMiddleware(Middleware):
    """One line when a request goes out, one when its answer is complete."""

    async def complete(self, request: Request, call_next: Any) -> Response:
        log.info("-> %s (%d messages)", request.model, len(request.messages))
        response = await call_next(request)
        log.info(
            "<- %s %s: %d tokens, $%s",
            response.model,
            response.finish_reason.reason,
            response.usage.total_tokens,
            response.cost_usd,
        )
        return response

    async def stream(self, request: Request, call_next: Any) -> AsyncIterator[Any]:
        log.info("-> %s (%d messages, streamed)", request.model, len(request.messages))
        events = 0
        async for event in call_next(request):
            events += 1
            if type(event) is Finish:
                log.info(
                    "<- %s %s: %d tokens, $%s, %d events",
                    event.response.model,
                    event.response.finish_reason.reason,
                    event.response.usage.total_tokens,
                    event.response.cost_usd,
                    events,
                )
            yield event


class BudgetExceeded(Exception):
    """Raised instead of sending a request once the budget is spent."""


class CostBudget(Middleware):
    """Refuses every request once `limit_usd` has been spent (as the daemon priced it)."""

    def __init__(self, limit_usd: float) -> None:
        self.limit_usd = limit_usd
        self.spent_usd = 0.0

    def _check(self) -> None:
        if self.spent_usd >= self.limit_usd:
            raise BudgetExceeded(f"budget of ${self.limit_usd:g} spent (${self.spent_usd:.6f}); request refused")

    async def complete(self, request: Request, call_next: Any) -> Response:
        self._check()
        response = await call_next(request)
        self.spent_usd += response.cost_usd or 0.0
        return response

    async def stream(self, request: Request, call_next: Any) -> AsyncIterator[Any]:
        self._check()
        async for event in call_next(request):
            if type(event) is Finish:
                self.spent_usd += event.response.cost_usd or 0.0
            yield event


class RequestCache(Middleware):
    """Answers a request seen before from memory: the same model, messages and settings."""

    def __init__(self) -> None:
        self.responses: dict[str, Response] = {}
        self.streams: dict[str, list[Any]] = {}
        self.hits = 0

    @staticmethod
    def key(request: Request) -> str:
        return hashlib.sha256(msgspec.json.encode(request)).hexdigest()

    async def complete(self, request: Request, call_next: Any) -> Response:
        key = self.key(request)
        if key in self.responses:
            self.hits += 1
            return self.responses[key]
        response = await call_next(request)
        self.responses[key] = response
        return response

    async def stream(self, request: Request, call_next: Any) -> AsyncIterator[Any]:
        key = self.key(request)
        if key in self.streams:
            self.hits += 1
            for event in self.streams[key]:
                yield event
            return
        seen = []
        async for event in call_next(request):
            seen.append(event)
            yield event
        if seen and type(seen[-1]) is Finish:  # only whole, successful answers are kept
            self.streams[key] = seen
