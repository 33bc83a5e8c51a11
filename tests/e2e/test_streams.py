"""The real daemon, real sockets, the real client: streaming, completing, cancelling."""

from __future__ import annotations

import json

import msgspec
import pytest
import trio

from helpers import check_invariants, steps
from trunkline import Client, Message, Request
from trunkline.errors import InvalidRequestError, NotFoundError, RateLimitError
from trunkline.protocol.accumulate import StreamAccumulator
from trunkline.protocol.messages import Finish, ReasoningEnd, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart

pytestmark = pytest.mark.e2e


async def collect(client: Client, request: Request) -> list:
    events = []
    async with client.stream(request) as stream:
        async for ev in stream:
            events.append(ev)
    return events


async def test_echo_streams_in_deltas_and_matches_complete(daemon):
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            request = Request(model="mock:echo", messages=[Message.user("the quick brown fox")])
            events = await collect(client, request)
            check_invariants(events)
            deltas = [e.text for e in events if type(e) is TextDelta]
            assert len(deltas) == 4 and "".join(deltas) == "the quick brown fox"
            streamed = events[-1].response

            completed = await client.complete(request)
            acc = StreamAccumulator()
            for ev in events[:-1]:
                acc.feed(ev)
            rebuilt = acc.response()

    for response in (streamed, completed):
        assert response.text == "the quick brown fox"
        assert response.finish_reason.reason == "stop"
        assert response.provider == "mock" and response.model == "echo"
        assert response.usage.input_tokens > 0 and response.usage.output_tokens == 4
        assert response.usage.total_tokens == response.usage.input_tokens + 4
        # mock:echo costs $1/M input and $2/M output
        expected = (response.usage.input_tokens * 1.0 + 4 * 2.0) / 1e6
        assert response.cost_usd == pytest.approx(expected)
        assert response.pricing_version
    assert completed.message == streamed.message == rebuilt.message
    assert completed.usage == streamed.usage


async def test_scripted_reasoning_and_parallel_tool_calls(daemon):
    script = steps(
        {"reasoning": "Let me think. "},
        {"reasoning": "Two lookups."},
        {"signature": "sig-123"},
        {"text": "Checking both cities."},
        {
            "tool_call": {
                "name": "weather",
                "arguments": {"city": "Paris", "unit": "°C"},
                "chunks": 4,
                "id": "call_abc123_with_underscores",
            }
        },
        {"tool_call": {"name": "weather", "arguments": {"city": "Tōkyō"}, "chunks": 3}},
        {"usage": {"input_tokens": 120, "output_tokens": 40, "reasoning_tokens": 12, "cache_read_tokens": 100}},
        {"finish": "tool_calls"},
    )
    request = Request(
        model="mock:echo", messages=[Message.user("weather in Paris and Tokyo?")], provider_options=script
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            events = await collect(client, request)
            completed = await client.complete(request)
    check_invariants(events)
    starts = [e for e in events if type(e) is ToolCallStart]
    ends = [e for e in events if type(e) is ToolCallEnd]
    assert [e.name for e in starts] == ["weather", "weather"]
    assert all(e.id.startswith("tu_") and len(e.id) == 29 for e in starts)
    assert starts[0].provider_id == "call_abc123_with_underscores"
    fragments = [e.partial_json for e in events if type(e) is ToolCallDelta and e.index == starts[0].index]
    assert len(fragments) == 4 and json.loads("".join(fragments)) == {"city": "Paris", "unit": "°C"}
    assert ends[0].arguments == {"city": "Paris", "unit": "°C"}
    assert ends[1].arguments == {"city": "Tōkyō"}
    reasoning = next(e for e in events if type(e) is ReasoningEnd)
    assert reasoning.text == "Let me think. Two lookups." and reasoning.signature == "sig-123"

    response = events[-1].response
    assert response.finish_reason.reason == "tool_calls"
    calls = response.tool_calls
    assert [c.id for c in calls] == [e.id for e in starts]
    assert calls[0].provider_id == "call_abc123_with_underscores" and calls[0].provider == "mock"
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (120, 40, 100)
    # 20 plain input at $1/M, 100 cached at $0.10/M, 40 output at $2/M
    assert response.cost_usd == pytest.approx((20 * 1.0 + 100 * 0.10 + 40 * 2.0) / 1e6)
    # complete() sees the same content, with its own (new) canonical ids
    assert [type(p) for p in completed.message.content] == [type(p) for p in response.message.content]
    assert [c.arguments for c in completed.tool_calls] == [c.arguments for c in calls]


async def test_tool_ids_round_trip_through_the_provider(daemon):
    """A tool call's canonical id, sent back in the next turn, reaches the provider as its own id."""
    first = Request(
        model="mock:echo",
        messages=[Message.user("call it")],
        provider_options=steps(
            {"tool_call": {"name": "lookup", "arguments": {"q": 1}, "id": "call_abc123_with_underscores"}},
            {"finish": "tool_calls"},
        ),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(first)
            call = response.tool_calls[0]
            history = [Message.user("call it"), response.message, Message.tool_result(call.id, "42")]
            # Another language's client may drop provider_id: the worker's map still knows it.
            stripped = msgspec.structs.replace(call, provider_id=None, provider=None)
            history[1] = Message(role="assistant", content=[stripped])
            second = await client.complete("mock:echo", history)
    assert call.id.startswith("tu_") and call.provider_id == "call_abc123_with_underscores"
    assert second.finish_reason.reason == "stop"


async def test_invalid_requests_are_rejected_before_any_call(daemon):
    cases = [
        ([Message.user("hi"), Message.system("late system")], "system message"),
        ([Message.assistant("hello")], "start with a user message"),
        ([Message.user("hi"), Message.assistant("yo")], "last message"),
        ([Message.user("hi"), Message.tool_result("tu_nope", "x")], "does not answer"),
        ([Message.user("")], "non-empty"),
    ]
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            for messages, words in cases:
                with pytest.raises(InvalidRequestError, match=words):
                    await client.complete("mock:echo", messages)
            with pytest.raises(InvalidRequestError, match="duplicate tool name"):
                await client.complete("mock:echo", "hi", tools=[{"name": "a"}, {"name": "a"}])
            with pytest.raises(InvalidRequestError, match=r"must match"):
                await client.complete("mock:echo", "hi", tools=[{"name": "bad.name"}])
            with pytest.raises(InvalidRequestError, match="does not support tools"):
                await client.complete("mock:basic", "hi", tools=[{"name": "a"}])
            image = Message.user("what is this", {"type": "image", "url": "https://example.com/cat.png"})
            with pytest.raises(InvalidRequestError, match="does not accept images"):
                await client.complete("mock:basic", [msgspec.convert(msgspec.to_builtins(image), Message)])
            with pytest.raises(NotFoundError, match="unknown model"):
                await client.complete("no-such-model", "hi")
            status = await client.status()
    assert status.workers[0].in_flight == 0


async def test_retryable_error_is_retried_then_succeeds(daemon):
    request = Request(
        model="mock:echo",
        messages=[Message.user("retry me")],
        provider_options=steps(
            {"error": {"error_class": "rate_limit", "status": 429, "retry_after": 0.05, "attempts": 2}},
            {"text": "finally"},
            {"finish": "stop"},
        ),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            response = await client.complete(request, request_id="req-retry")
            names = []
            while "llm.call_completed" not in names:
                ev = await client.bus_events.receive()
                if ev.request_id == "req-retry":
                    names.append(ev.name)
                    if ev.name == "llm.rate_limited":
                        assert ev.wait_s == pytest.approx(0.05)
    assert response.text == "finally"
    assert names.count("llm.call_started") == 3
    assert names.count("llm.call_failed") == 2 and names.count("llm.retrying") == 2


async def test_non_retryable_error_is_not_retried(daemon):
    request = Request(
        model="mock:echo",
        messages=[Message.user("no")],
        provider_options=steps(
            {"error": {"error_class": "invalid_request", "status": 400, "message": "bad field foo"}}
        ),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            with pytest.raises(InvalidRequestError, match="bad field foo") as info:
                await client.complete(request, request_id="req-noretry")
            names = []
            while "llm.call_failed" not in names:
                ev = await client.bus_events.receive()
                if ev.request_id == "req-noretry":
                    names.append(ev.name)
    assert info.value.status == 400 and not info.value.retryable
    assert names == ["llm.call_started", "llm.call_failed"]


async def test_retry_after_beyond_cap_is_returned_not_waited(daemon):
    request = Request(
        model="mock:echo",
        messages=[Message.user("no")],
        provider_options=steps({"error": {"error_class": "rate_limit", "status": 429, "retry_after": 3600}}),
    )
    with trio.fail_after(10):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(RateLimitError, match="exceeds the cap") as info:
                await client.complete(request)
    assert info.value.retry_after == 3600 and info.value.retryable


async def test_error_mid_stream_ends_with_partial(daemon):
    request = Request(
        model="mock:echo",
        messages=[Message.user("x")],
        provider_options=steps(
            {"text": "partial "},
            {"text": "answer"},
            {"error": {"error_class": "rate_limit", "message": "overloaded_error: Overloaded", "status": 529}},
        ),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            events = await collect(client, request)
    check_invariants(events)
    last = events[-1]
    assert last.error.error_class == "rate_limit" and "not retried" in last.error.message
    assert last.partial.text == "partial answer"


async def test_duplicate_submit_makes_one_provider_call(daemon):
    request = Request(model="mock:echo", messages=[Message.user("once")])
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            first, route = await client.submit(request, request_id="req-dup")
            again, _ = await client.submit(request, request_id="req-dup")
            events = [ev async for ev in route.events()]
            started = 0
            done = False
            while not done:
                ev = await client.bus_events.receive()
                if ev.request_id == "req-dup":
                    started += ev.name == "llm.call_started"
                    done = ev.name == "llm.call_completed"
            # a late duplicate (after the end) is still recognised
            late, _ = await client.submit(request, request_id="req-dup")
    assert not first.duplicate and again.duplicate and late.duplicate
    assert started == 1
    assert type(events[-1]) is Finish and events[-1].response.text == "once"
