"""Middleware through the real daemon: the onion order on complete and stream calls,
and the three examples in docs/examples/middleware.py doing what they say."""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

import pytest
import trio

import trunkline
from helpers import REPO
from trunkline import Client, Middleware
from trunkline.protocol.messages import Finish, TextDelta

pytestmark = pytest.mark.e2e

_spec = importlib.util.spec_from_file_location("middleware_examples", REPO / "docs" / "examples" / "middleware.py")
assert _spec is not None and _spec.loader is not None
examples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(examples)


class Mark(Middleware):
    """Writes its name on the way in and on the way out, and tags the request."""

    def __init__(self, name: str, trail: list[str]) -> None:
        self.name = name
        self.trail = trail

    async def complete(self, request: Any, call_next: Any) -> Any:
        self.trail.append(f"{self.name}>")
        request.metadata[self.name] = str(len(self.trail))
        response = await call_next(request)
        self.trail.append(f"<{self.name}")
        return response

    async def stream(self, request: Any, call_next: Any) -> Any:
        self.trail.append(f"{self.name}>")
        async for event in call_next(request):
            if type(event) is TextDelta:
                event.text = event.text.upper() if self.name == "inner" else event.text
            yield event
        self.trail.append(f"<{self.name}")


class Counter(Middleware):
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def complete(self, request: Any, call_next: Any) -> Any:
        self.sent.append(request)
        return await call_next(request)

    async def stream(self, request: Any, call_next: Any) -> Any:
        self.sent.append(request)
        async for event in call_next(request):
            yield event


async def test_requests_go_in_registration_order_and_responses_come_back_in_reverse(daemon):
    trail: list[str] = []
    counter = Counter()
    with trio.fail_after(30):
        async with Client(
            daemon.runtime_dir, middleware=[Mark("outer", trail), Mark("inner", trail), counter]
        ) as client:
            response = await client.complete("mock:echo", "hello there")
            assert trail == ["outer>", "inner>", "<inner", "<outer"]
            assert counter.sent[0].metadata == {"outer": "1", "inner": "2"}  # changes reach the daemon
            trail.clear()
            async with client.stream("mock:echo", "hello there") as stream:
                text = "".join([t async for t in stream.text_stream])
            assert trail == ["outer>", "inner>", "<inner", "<outer"]
            streamed = await stream.response()
    assert response.text == "hello there"
    assert text == "HELLO THERE" and streamed.text == "hello there"  # a middleware rewrote the deltas


async def test_a_plain_function_is_a_complete_middleware(daemon):
    seen = []

    async def note(request: Any, call_next: Any) -> Any:
        seen.append(request.model)
        return await call_next(request)

    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, middleware=[note]) as client:
            await client.complete("mock:echo", "x")
            async with client.stream("mock:echo", "y") as stream:
                await stream.response()
    assert seen == ["mock:echo"]


async def test_the_logging_example_logs_complete_and_stream_calls(daemon, caplog):
    caplog.set_level(logging.INFO, logger="trunkline.requests")
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, middleware=[examples.LoggingMiddleware()]) as client:
            await client.complete("mock:echo", "one two")
            async with client.stream("mock:echo", "three four") as stream:
                await stream.response()
    lines = [r.getMessage() for r in caplog.records if r.name == "trunkline.requests"]
    assert lines[0] == "-> mock:echo (1 messages)" and lines[1].startswith("<- echo stop: ")
    assert lines[2] == "-> mock:echo (1 messages, streamed)" and lines[3].startswith("<- echo stop: ")
    assert lines[3].endswith("events") and len(lines) == 4


async def test_the_budget_example_refuses_once_the_limit_is_spent(daemon):
    budget = examples.CostBudget(limit_usd=1e-9)  # the first mock call spends more than this
    counter = Counter()
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, middleware=[budget, counter]) as client:
            await client.complete("mock:echo", "spend")
            assert budget.spent_usd > 0
            with pytest.raises(examples.BudgetExceeded, match="budget of \\$1e-09 spent"):
                await client.complete("mock:echo", "more")
            with pytest.raises(examples.BudgetExceeded):
                async with client.stream("mock:echo", "more") as stream:
                    await stream.response()
            with pytest.raises(examples.BudgetExceeded):
                await trunkline.generate("mock:echo", "more", client=client)
        async with Client(daemon.runtime_dir, middleware=[examples.CostBudget(limit_usd=1e-9)]) as client:
            async with client.stream("mock:echo", "spend by stream") as stream:
                await stream.response()
            with pytest.raises(examples.BudgetExceeded):
                await client.complete("mock:echo", "more")
    assert len(counter.sent) == 1  # nothing refused reached the daemon


async def test_the_cache_example_answers_a_repeated_request_from_memory(daemon):
    cache = examples.RequestCache()
    counter = Counter()
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, middleware=[cache, counter]) as client:
            first = await client.complete("mock:echo", "cache me")
            second = await client.complete("mock:echo", "cache me")
            other = await client.complete("mock:echo", "cache me", max_tokens=1)
            streams = []
            for _ in range(2):
                async with client.stream("mock:echo", "stream me") as stream:
                    events = [e async for e in stream]
                    streams.append((events, await stream.response()))
    assert first == second and other.text.strip() == "cache" and cache.hits == 2
    assert len(counter.sent) == 3  # "cache me", "cache me" with max_tokens, one stream
    (events_a, _response_a), (events_b, response_b) = streams
    assert events_a == events_b and type(events_b[-1]) is Finish and response_b.text == "stream me"
