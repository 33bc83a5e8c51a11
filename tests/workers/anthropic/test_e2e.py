"""Anthropic end to end: the real daemon, real sockets, the real client, a fake Anthropic on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
import trio

from fakes.upstream import FakeUpstream, Reply
from helpers import REPO, check_invariants
from trunkline import Client, Message, Request, Tool
from trunkline.errors import AuthenticationError, InvalidRequestError
from trunkline.protocol.messages import TextDelta, ThinkingPart, ToolCallPart

pytestmark = pytest.mark.e2e

KEY = "fake-anthropic-key-never-to-be-seen-0123456789"
CASSETTES = REPO / "cassettes" / "anthropic"


def error(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    return await start_daemon(
        {"providers": {"anthropic": {"base_url": upstream.base_url}}}, env={"ANTHROPIC_API_KEY": KEY}
    )


async def test_stream_through_the_daemon(daemon, upstream):
    upstream.route(
        "POST", "/v1/messages", Reply.sse((CASSETTES / "tools-parallel.sse").read_bytes(), chunk_size=50, delay_s=0.001)
    )
    request = Request(
        model="anthropic:claude-sonnet-4-5",
        messages=[Message.system("Be brief."), Message.user("Weather in Paris?")],
        tools=[Tool(name="get_weather"), Tool(name="current_time")],
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream(request) as stream:
                async for ev in stream:
                    events.append(ev)
    check_invariants(events)
    response = events[-1].response
    assert response.text == "I'll check both — Paris and Tōkyō."
    assert [c.name for c in response.tool_calls] == ["get_weather", "current_time"]
    assert all(c.id.startswith("tu_") and c.provider == "anthropic" for c in response.tool_calls)
    assert response.usage.input_tokens == 800 and response.cost_usd is not None
    sent = upstream.requests[0]
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    body = sent.json()
    assert body["model"] == "claude-sonnet-4-5" and body["stream"] is True
    assert body["system"][0]["text"] == "Be brief." and body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["max_tokens"] > 0


async def test_a_conversation_continues_with_the_providers_own_ids_and_signatures(daemon, upstream):
    upstream.route(
        "POST",
        "/v1/messages",
        Reply.sse((CASSETTES / "tools-parallel.sse").read_bytes()),
        Reply.sse((CASSETTES / "thinking.sse").read_bytes()),
        Reply.json(
            {
                "id": "msg_3",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "Done."}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 5, "output_tokens": 2},
            }
        ),
    )
    tools = [Tool(name="get_weather"), Tool(name="current_time"), Tool(name="lookup")]
    model = "anthropic:claude-sonnet-4-5"
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            history = [Message.user("weather and time?")]
            async with client.stream(model, history, tools=tools, session_id="s1") as stream:
                first = await stream.response()
            paris, clock = first.tool_calls
            # a tool call that came from another provider (the mock) sits in the history too
            mock = await client.complete(
                "mock:echo",
                "x",
                provider_options={
                    "mock": {
                        "steps": [{"tool_call": {"name": "lookup", "arguments": {"q": 1}}}, {"finish": "tool_calls"}]
                    }
                },
            )
            foreign = mock.tool_calls[0]
            history += [
                first.message,
                Message.tool_result(paris.id, "18°C"),
                Message.tool_result(clock.id, "noon"),
                mock.message,
                Message.tool_result(foreign.id, "found"),
            ]
            async with client.stream(model, history, tools=tools, session_id="s1") as stream:
                second = await stream.response()
            history += [second.message, Message.user("thanks")]
            third = await client.complete(model, history, tools=tools, session_id="s1")
    assert third.text == "Done."
    body2 = upstream.requests[1].json()
    assistant = body2["messages"][1]["content"]
    uses = [b for b in assistant if b["type"] == "tool_use"]
    assert [u["id"] for u in uses] == ["toolu_01Paris", "toolu_02Clock"]  # the provider's own ids, verbatim
    results = [b for m in body2["messages"] if m["role"] == "user" for b in m["content"] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["toolu_01Paris", "toolu_02Clock", foreign.id]
    foreign_use = [
        b for m in body2["messages"] for b in m["content"] if b["type"] == "tool_use" and b["name"] == "lookup"
    ]
    assert foreign_use[0]["id"] == foreign.id  # a canonical id is a valid Anthropic id
    body3 = upstream.requests[2].json()
    replayed = [
        b
        for m in body3["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] in ("thinking", "redacted_thinking")
    ]
    assert replayed == [
        {"type": "thinking", "thinking": "Two plus two is four.", "signature": "EqQBCkgIARABGAIiQL+sig=="},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
    ]
    assert body3["stream"] is True  # whole responses are streamed from the provider too


async def test_overloaded_is_retried_with_the_same_idempotency_key(daemon, upstream):
    upstream.route(
        "POST",
        "/v1/messages",
        Reply(529, {"content-type": "application/json"}, [error("overloaded_error", "Overloaded")]),
        Reply.sse((CASSETTES / "thinking.sse").read_bytes()),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client, client.stream("anthropic:claude-sonnet-4-5", "2+2?") as s:
            response = await s.response()
    assert response.text == "4" and isinstance(response.message.content[0], ThinkingPart)
    first, second = upstream.requests
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]


async def test_anthropics_own_504_timeout_error_is_a_server_error_and_is_retried(daemon, upstream):
    # Anthropic's documented 504 (its side gave up processing) is an upstream failure like
    # any gateway's 504, not our own deadline: it is retried.
    upstream.route(
        "POST",
        "/v1/messages",
        Reply(504, {"content-type": "application/json"}, [error("timeout_error", "Request timed out")]),
        Reply.sse((CASSETTES / "thinking.sse").read_bytes()),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete("anthropic:claude-sonnet-4-5", "2+2?")
    assert response.text == "4"
    assert len(upstream.sent("/v1/messages")) == 2


async def test_cancel_closes_the_upstream_connection(daemon, upstream):
    body = (CASSETTES / "tools-parallel.sse").read_bytes()
    upstream.route("POST", "/v1/messages", Reply.sse(body, chunk_size=400, stall_after=2))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream("anthropic:claude-sonnet-4-5", "go") as stream:
                async for ev in stream:
                    if type(ev) is TextDelta:
                        await stream.cancel()
                response = await stream.response()
            await upstream.client_closed.wait()
    assert response.finish_reason.reason == "cancelled" and response.text.startswith("I'll check both")


async def test_authentication_error_never_shows_the_key(daemon, upstream):
    upstream.route(
        "POST",
        "/v1/messages",
        Reply(401, {"content-type": "application/json"}, [error("authentication_error", f"invalid x-api-key: {KEY}")]),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            with pytest.raises(AuthenticationError) as info:
                await client.complete("anthropic:claude-sonnet-4-5", "hi")
            failed = None
            while failed is None:
                ev = await client.bus_events.receive()
                if ev.name == "llm.call_failed":
                    failed = ev
    assert KEY not in str(info.value) and "[redacted]" in str(info.value)
    assert info.value.status == 401 and not info.value.retryable
    assert KEY not in (failed.detail or "")
    assert len(upstream.requests) == 1  # not retried
    await daemon.stop()
    assert KEY not in daemon.output()


async def test_context_too_long_is_refused(daemon, upstream):
    upstream.route(
        "POST",
        "/v1/messages",
        Reply(
            400,
            {"content-type": "application/json"},
            [error("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")],
        ),
    )
    from trunkline.errors import ContextLengthError

    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(ContextLengthError):
                await client.complete("anthropic:claude-sonnet-4-5", "hi")
            with pytest.raises(InvalidRequestError, match="does not answer"):
                await client.complete(
                    "anthropic:claude-sonnet-4-5", [Message.user("x"), Message.tool_result("tu_missing", "r")]
                )
    assert len(upstream.requests) == 1  # the invalid request never reached the provider


async def test_non_streaming_complete(daemon, upstream):
    upstream.route(
        "POST",
        "/v1/messages",
        Reply.json(
            {
                "id": "msg_2",
                "type": "message",
                "role": "assistant",
                "model": "claude-haiku-4-5",
                "content": [
                    {"type": "text", "text": "Hello!"},
                    {"type": "tool_use", "id": "toolu_X", "name": "f", "input": {"a": 1}},
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 9, "output_tokens": 4},
            },
            headers={"anthropic-ratelimit-requests-remaining": "49", "anthropic-ratelimit-requests-limit": "50"},
        ),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete("anthropic:claude-haiku-4-5", "hi", tools=[Tool(name="f")])
    assert response.text == "Hello!" and response.finish_reason.reason == "tool_calls"
    call = response.tool_calls[0]
    assert isinstance(call, ToolCallPart) and call.provider_id == "toolu_X" and call.arguments == {"a": 1}
    assert response.rate_limit.requests_remaining == 49 and response.rate_limit.requests_limit == 50
    assert upstream.requests[0].json()["stream"] is True  # whole responses are streamed from the provider too


async def test_ready_checks_the_models_endpoint(daemon, upstream):
    upstream.route("GET", "/v1/models/claude-sonnet-4-5", Reply.json({"id": "claude-sonnet-4-5", "type": "model"}))
    upstream.route(
        "GET",
        "/v1/models/claude-nope",
        Reply(404, {"content-type": "application/json"}, [error("not_found_error", "model: claude-nope")]),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            ok = await client.ready("anthropic:claude-sonnet-4-5")
            missing = await client.ready("anthropic:claude-nope")
    assert ok.ok and ok.error is None
    assert not missing.ok and missing.error.error_class == "not_found"
    assert upstream.requests[0].headers["x-api-key"] == KEY


async def test_without_a_key_the_provider_is_not_configured(start_daemon):
    from trunkline.errors import NotConfiguredError

    daemon = await start_daemon(env={"ANTHROPIC_API_KEY": ""})
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(NotConfiguredError, match="ANTHROPIC_API_KEY"):
                await client.complete("anthropic:claude-sonnet-4-5", "hi")
            assert (await client.complete("mock:echo", "still works")).text == "still works"
            status = {w.provider: w.state for w in (await client.status()).workers}
    assert status["anthropic"] == "not_configured" and status["mock"] == "running"


def _reply(model: str, usage: dict, stream: bool = True) -> Reply:
    if not stream:
        return Reply.json(
            {
                "id": "msg_r",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "usage": usage,
            }
        )
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_r",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "usage": usage,
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return Reply.sse("".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode())


async def test_model_rules_through_the_daemon(daemon, upstream):
    """Issue 12 end to end: a dated snapshot is sent and accepted as named; a parameter the model
    does not take is left out with a warning; a request it cannot serve never reaches the provider;
    the cost counts the 1-hour cache writes at their own price."""
    upstream.route(
        "POST",
        "/v1/messages",
        _reply(
            "claude-haiku-4-5-20251001",
            {
                "input_tokens": 1000,
                "output_tokens": 100,
                "cache_creation_input_tokens": 3000,
                "cache_creation": {"ephemeral_5m_input_tokens": 2000, "ephemeral_1h_input_tokens": 1000},
            },
        ),
        _reply("claude-opus-5-5", {"input_tokens": 10, "output_tokens": 2}, stream=False),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream(
                Request(model="claude-haiku-4-5-20251001", messages=[Message.user("hi")], temperature=0.2, top_p=0.5)
            ) as stream:
                response = await stream.response()
            assert stream.accepted.model == "anthropic:claude-haiku-4-5-20251001"
            with pytest.raises(
                InvalidRequestError,
                match=r"reasoning_effort 'none' is not available on "
                r"anthropic:claude-opus-5-5",
            ):
                await client.complete("opus", "hi", reasoning_effort="none")
            opus = await client.complete("opus", "hi", temperature=0.9)
    sent = [r.json() for r in upstream.requests]
    assert len(sent) == 2  # the refused request never reached the provider
    assert sent[0]["model"] == "claude-haiku-4-5-20251001" and sent[0]["temperature"] == 0.2
    assert "top_p" not in sent[0] and sent[0]["max_tokens"] == 16000
    assert [w.code for w in response.warnings] == ["sampling_unsupported"]
    # Haiku 4.5: 1,000 plain * $1 + 2,000 * $1.25 (5 min) + 1,000 * $2 (1 h) + 100 * $5 = 6,000 -> $0.006
    assert response.usage.cache_write_long_tokens == 1000
    assert response.cost_usd == pytest.approx(0.006) and response.pricing_version == "2026-11-23"
    assert sent[1]["model"] == "claude-opus-5-5" and "temperature" not in sent[1]
    assert "rule `sampling`" in opus.warnings[0].message


async def test_what_would_break_a_header_or_name_no_model_never_reaches_the_provider(daemon, upstream):
    """A line break in a header the caller asks for, or a model name left empty, is
    refused before any call; a request id no header can carry still goes out, its
    idempotency key a digest of it, the same on every attempt."""
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    upstream.route(
        "POST",
        "/v1/messages",
        Reply(529, {"content-type": "application/json"}, [error("overloaded_error", "Overloaded")]),
        Reply.json(reply),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            for betas in (["ok-2025", "x\r\nX-Injected: 1"], "é"):
                with pytest.raises(InvalidRequestError, match="beta_headers"):
                    await client.complete(
                        "anthropic:claude-sonnet-4-5", "hi", provider_options={"anthropic": {"beta_headers": betas}}
                    )
            for empty in ("anthropic:", "anthropic: "):
                with pytest.raises(InvalidRequestError, match="model name is empty"):
                    await client.complete(empty, "hi")
            assert not upstream.requests
            response = await client.complete("anthropic:claude-sonnet-4-5", "hi", request_id="req\r\nX-Injected: é")
    assert response.text == "ok"
    keys = [r.headers["idempotency-key"] for r in upstream.sent("/v1/messages")]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0].startswith("tl-")
    assert all("x-injected" not in r.headers for r in upstream.requests)
