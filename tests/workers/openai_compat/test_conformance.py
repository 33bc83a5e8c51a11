"""The OpenArmature conformance cases 001-008, end to end: the real daemon, the real client,
an OpenAI-compatible fake server on 127.0.0.1; plus instances side by side."""

from __future__ import annotations

import json

import pytest
import trio

from fakes.upstream import FakeUpstream, Reply
from helpers import REPO, check_invariants
from trunkline import Client, Message, Tool
from trunkline.errors import (
    AuthenticationError,
    InvalidRequestError,
    InvalidResponseError,
    ModelNotLoadedError,
    NotFoundError,
    RateLimitError,
    ServerError,
)

pytestmark = pytest.mark.e2e

KEY = "sk-vllm-test-0123456789abcdef"
MODEL = "vllm:my-model"
CHAT = "/v1/chat/completions"
CASSETTES = REPO / "cassettes" / "openai_compat"
LOOKUP = Tool(
    name="lookup",
    description="Look something up",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


def completion(content=None, tool_calls=None, finish="stop", usage=True, **extra):
    message = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "my-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **extra}],
    }
    body["usage"] = {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28} if usage else None
    return Reply.json(body)


def error(status: int, body: dict) -> Reply:
    return Reply(status, {"content-type": "application/json"}, [json.dumps(body).encode()])


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    return await start_daemon(
        {
            "providers": {
                "vllm": {"type": "openai_compat", "base_url": upstream.base_url + "/v1", "api_key_env": "VLLM_KEY"}
            }
        },
        env={"VLLM_KEY": KEY},
    )


async def test_001_basic_completion(daemon, upstream):
    upstream.route("POST", "/v1/chat/completions", completion("Hello there."))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(MODEL, [Message.system("Be nice."), Message.user("Hi")])
    assert response.message.role == "assistant" and response.text == "Hello there."
    assert response.finish_reason.reason == "stop" and not response.tool_calls
    sent = upstream.sent(CHAT)[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.json()["messages"] == [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "Hi"}]


async def test_002_tool_call_round_trip_keeps_the_id(daemon, upstream):
    upstream.route(
        "POST",
        "/v1/chat/completions",
        completion(
            None,
            [
                {
                    "id": "call_abc123_with_underscores",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "trunk"}'},
                }
            ],
            finish="tool_calls",
        ),
        completion("It is a trunk."),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            first = await client.complete(MODEL, "look up trunk", tools=[LOOKUP])
            call = first.tool_calls[0]
            history = [Message.user("look up trunk"), first.message, Message.tool_result(call.id, "a trunk")]
            second = await client.complete(MODEL, history, tools=[LOOKUP])
    assert first.finish_reason.reason == "tool_calls"
    assert call.provider_id == "call_abc123_with_underscores" and call.arguments == {"q": "trunk"}
    assert second.text == "It is a trunk." and second.finish_reason.reason == "stop"
    messages = upstream.sent(CHAT)[1].json()["messages"]
    assert messages[1]["tool_calls"][0]["id"] == "call_abc123_with_underscores"  # verbatim, not rewritten
    assert messages[2] == {"role": "tool", "tool_call_id": "call_abc123_with_underscores", "content": "a trunk"}


@pytest.mark.parametrize(
    ("messages", "tools", "words"),
    [
        ([Message.user("a"), Message.system("mid"), Message.user("b")], [], "may only come before"),
        ([Message.user("a"), Message.tool_result("call_none", "x")], [], "does not answer"),
        ([Message.user("a")], [Tool(name="t"), Tool(name="t")], "duplicate tool name"),
        ([Message.user("")], [], "non-empty"),
    ],
)
async def test_003_message_validation_before_any_wire_call(daemon, upstream, messages, tools, words):
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(InvalidRequestError, match=words):
                await client.complete(MODEL, messages, tools=tools)
    assert upstream.sent(CHAT) == []


@pytest.mark.parametrize(
    ("reply", "exception", "error_class"),
    [
        (
            error(401, {"error": {"message": "bad key", "code": "invalid_api_key"}}),
            AuthenticationError,
            "authentication",
        ),
        (
            error(404, {"error": {"message": "The model `my-model` does not exist", "code": "model_not_found"}}),
            NotFoundError,
            "not_found",
        ),
        (
            error(503, {"object": "error", "message": "Model my-model is loading", "code": 503}),
            ModelNotLoadedError,
            "model_not_loaded",
        ),
        (error(429, {"error": {"message": "slow down", "code": "rate_limit_exceeded"}}), RateLimitError, "rate_limit"),
        (error(502, {"error": {"message": "upstream broke"}}), ServerError, "server_error"),
        (
            Reply(200, {"content-type": "application/json"}, [b'{"choices": "nope"']),
            InvalidResponseError,
            "invalid_response",
        ),
    ],
)
async def test_004_error_categories(daemon, upstream, reply, exception, error_class):
    upstream.route("POST", "/v1/chat/completions", reply)
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(exception) as info:
                await client.complete(MODEL, "hi", max_retries=0)
    assert info.value.info.error_class == error_class
    assert KEY not in str(info.value)


async def test_005_wire_mapping_keeps_provider_extensions_in_raw(daemon, upstream):
    upstream.route(
        "POST", "/v1/chat/completions", completion("ok", logprobs={"content": [{"token": "ok", "logprob": -0.1}]})
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(
                MODEL, "hi", temperature=0.5, max_tokens=20, top_p=0.9, seed=1, tools=[LOOKUP], include_raw=True
            )
    sent = upstream.sent(CHAT)[0].json()
    assert (sent["model"], sent["temperature"], sent["max_completion_tokens"], sent["top_p"], sent["seed"]) == (
        "my-model",
        0.5,
        20,
        0.9,
        1,
    )
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {"name": "lookup", "description": "Look something up", "parameters": LOOKUP.parameters},
        }
    ]
    assert response.raw["choices"][0]["logprobs"] == {"content": [{"token": "ok", "logprob": -0.1}]}
    assert response.text == "ok"


async def test_006_usage_present_and_absent(daemon, upstream):
    upstream.route("POST", "/v1/chat/completions", completion("with usage"), completion("without", usage=False))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            present = await client.complete(MODEL, "hi")
            absent = await client.complete(MODEL, "hi")
    assert (present.usage.input_tokens, present.usage.output_tokens, present.usage.total_tokens) == (21, 7, 28)
    assert not present.usage.estimated
    # No usage from the server: estimated, flagged, and said in a warning (never silently zero).
    assert absent.usage.estimated and absent.usage.output_tokens > 0
    assert absent.usage.estimated_fields == ["input_tokens", "output_tokens", "total_tokens"]
    assert any(w.code == "usage_estimated" for w in absent.warnings)


@pytest.mark.parametrize(
    ("reply", "ok", "error_class"),
    [
        (Reply.json({"data": [{"id": "my-model", "object": "model"}]}), True, None),
        (Reply.json({"data": [{"id": "my-model", "state": "not-loaded"}]}), False, "model_not_loaded"),
        (error(401, {"error": {"message": "bad key"}}), False, "authentication"),
        (Reply.json({"data": [{"id": "other-model"}]}), False, "not_found"),
    ],
)
async def test_007_ready(daemon, upstream, reply, ok, error_class):
    upstream.route("GET", "/v1/models", reply)
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            result = await client.ready(MODEL)
    assert result.ok is ok
    assert (result.error.error_class if result.error else None) == error_class


async def test_007_ready_when_the_server_is_down(start_daemon):
    daemon = await start_daemon({"providers": {"vllm": {"type": "openai_compat", "base_url": "http://127.0.0.1:9/v1"}}})
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            result = await client.ready(MODEL)
    assert not result.ok and result.error.error_class == "network" and result.error.retryable


async def test_008_error_finish_with_malformed_tool_calls_is_returned(daemon, upstream):
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "ok"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "lookup", "arguments": '{"nope": 1}'}},
        {"id": "call_3", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "tru'}},
    ]
    upstream.route("POST", "/v1/chat/completions", completion(None, calls, finish="error"))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(MODEL, "go", tools=[LOOKUP], include_raw=True)
    assert response.finish_reason.reason == "error"
    assert [c.arguments for c in response.tool_calls] == [{"q": "ok"}, {"nope": 1}, None]
    assert response.tool_calls[2].raw_arguments == '{"q": "tru'
    assert response.raw["choices"][0]["message"]["tool_calls"][2]["function"]["arguments"] == '{"q": "tru'


async def test_streaming_through_the_daemon(daemon, upstream):
    upstream.route(
        "POST",
        "/v1/chat/completions",
        Reply.sse((CASSETTES / "parallel-tools.sse").read_bytes(), chunk_size=64, delay_s=0.001),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream(
                MODEL, "weather and time", tools=[Tool(name="get_weather"), Tool(name="get_time")]
            ) as stream:
                async for ev in stream:
                    events.append(ev)
    check_invariants(events)
    response = events[-1].response
    assert [c.arguments for c in response.tool_calls] == [{"city": "Paris"}, {"tz": "Asia/Tōkyō"}]
    assert upstream.sent(CHAT)[0].json()["stream_options"] == {"include_usage": True}


async def test_instances_side_by_side(start_daemon, nursery):
    a = await FakeUpstream().start(nursery)
    b = await FakeUpstream().start(nursery)
    a.route("POST", "/v1/chat/completions", completion("from vllm"))
    b.route("POST", "/api/v1/chat/completions", completion("from openrouter"))
    daemon = await start_daemon(
        {
            "providers": {
                "vllm": {
                    "type": "openai_compat",
                    "base_url": a.base_url + "/v1",
                    "options": {"legacy_max_tokens": True},
                },
                "openrouter": {"enabled": True, "base_url": b.base_url + "/api/v1"},
            }
        },
        env={"OPENROUTER_API_KEY": "sk-or-test-key-0000000000"},
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            one = await client.complete("vllm:llama", "hi", max_tokens=5)
            two = await client.complete("openrouter:meta-llama/llama-3.3-70b", "hi", max_tokens=5)
            workers = {w.provider: w for w in (await client.status()).workers}
    assert one.text == "from vllm" and one.provider == "vllm"
    assert two.text == "from openrouter" and two.provider == "openrouter"
    assert workers["vllm"].pid != workers["openrouter"].pid and workers["vllm"].state == "running"
    assert a.sent(CHAT)[0].json()["max_tokens"] == 5 and "authorization" not in a.sent(CHAT)[0].headers
    sent = b.sent("/api/v1/chat/completions")[0]
    assert sent.json()["model"] == "meta-llama/llama-3.3-70b" and sent.json()["max_completion_tokens"] == 5
    assert sent.headers["authorization"] == "Bearer sk-or-test-key-0000000000"
    assert sent.headers["x-title"] == "trunkline" and sent.headers["http-referer"]
