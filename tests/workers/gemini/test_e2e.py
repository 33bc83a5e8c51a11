"""Gemini end to end: the real daemon, real sockets, the real client, a fake Gemini on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
import trio

from fakes.gemini_stream import chunk, error, sse
from fakes.upstream import FakeUpstream, Reply
from helpers import check_invariants
from trunkline import Client, Message, Request, Tool
from trunkline.errors import RateLimitError
from trunkline.protocol.messages import ProviderPart, ResponseFormat, TextDelta, ThinkingPart

pytestmark = pytest.mark.e2e

KEY = "gk-test-fake-gemini-key-never-to-be-seen-0123"
FLASH = "gemini:gemini-3.8-flash"
STREAM = "/v1beta/models/gemini-3.8-flash:streamGenerateContent"
GENERATE = "/v1beta/models/gemini-3.8-flash:generateContent"


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    return await start_daemon(
        {"providers": {"gemini": {"base_url": upstream.base_url}}}, env={"GEMINI_API_KEY": KEY, "GOOGLE_API_KEY": ""}
    )


async def test_parallel_id_less_calls_across_chunks_and_their_results(daemon, upstream):
    model = "gemini:gemini-2.5-flash"
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    upstream.route(
        "POST",
        path,
        Reply.sse(
            sse(
                chunk({"text": "Checking both "}),
                chunk(
                    {"text": "cities — Paris & Tōkyō."},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                ),
                chunk(
                    {"functionCall": {"name": "get_weather", "args": {"city": "Tōkyō"}}},
                    finish="STOP",
                    usage={"promptTokenCount": 20, "candidatesTokenCount": 9, "totalTokenCount": 29},
                ),
            ),
            chunk_size=37,
            delay_s=0.001,
        ),
        Reply.sse(sse(chunk({"text": "Both mild."}, finish="STOP"))),
    )
    tools = [Tool(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})]
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream(model, "Weather in Paris and Tokyo?", tools=tools, session_id="s") as stream:
                async for ev in stream:
                    events.append(ev)
            check_invariants(events)
            first = events[-1].response
            paris, tokyo = first.tool_calls
            history = [
                Message.user("Weather in Paris and Tokyo?"),
                first.message,
                Message.tool_result(paris.id, "18°C"),
                Message.tool_result(tokyo.id, "21°C"),
            ]
            async with client.stream(model, history, tools=tools, session_id="s") as stream:
                second = await stream.response()
    assert first.text == "Checking both cities — Paris & Tōkyō."
    assert [(c.name, c.arguments) for c in first.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Tōkyō"}),
    ]
    assert paris.id != tokyo.id and paris.id.startswith("tu_") and paris.provider_id is None
    assert first.finish_reason.reason == "tool_calls" and first.usage.input_tokens == 20
    assert second.text == "Both mild."
    sent = upstream.sent(path)
    assert sent[0].path.endswith(":streamGenerateContent?alt=sse") and "key=" not in sent[0].path
    assert sent[0].headers["x-goog-api-key"] == KEY
    contents = sent[1].json()["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [
            {"text": "Checking both cities — Paris & Tōkyō."},
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
            {"functionCall": {"name": "get_weather", "args": {"city": "Tōkyō"}}},
        ],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"result": "18°C"}}},
            {"functionResponse": {"name": "get_weather", "response": {"result": "21°C"}}},
        ],
    }


async def test_a_thinking_turns_signatures_come_back_on_the_exact_parts(daemon, upstream):
    upstream.route(
        "POST",
        STREAM,
        Reply.sse(
            sse(
                chunk({"text": "The user wants ", "thought": True}),
                chunk({"text": "a lookup.", "thought": True, "thoughtSignature": "U0lHLXRob3VnaHQ="}),
                chunk({"text": "Let me look."}, {"text": "", "thoughtSignature": "U0lHLXRleHQ="}),
                chunk(
                    {
                        "functionCall": {"name": "lookup", "args": {"q": "x"}, "id": "call-g1"},
                        "thoughtSignature": "U0lHLWNhbGw=",
                    },
                    {"functionCall": {"name": "lookup", "args": {"q": "y"}, "id": "call-g2"}},
                    finish="STOP",
                    usage={"promptTokenCount": 10, "candidatesTokenCount": 8, "thoughtsTokenCount": 30},
                ),
            ),
            chunk_size=23,
        ),
        Reply.sse(sse(chunk({"text": "Done."}, finish="STOP"))),
    )
    tools = [Tool(name="lookup")]
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream(FLASH, "look x and y", tools=tools, reasoning_effort="high") as stream:
                first = await stream.response()
            x, y = first.tool_calls
            history = [
                Message.user("look x and y"),
                first.message,
                Message.tool_result(x.id, "X"),
                Message.tool_result(y.id, "Y"),
            ]
            async with client.stream(FLASH, history, tools=tools, reasoning_effort="high") as stream:
                second = await stream.response()
    assert isinstance(first.message.content[0], ThinkingPart)
    assert first.message.content[0].text == "The user wants a lookup."
    assert first.usage.reasoning_tokens == 30 and first.usage.output_tokens == 38
    assert [p.data for p in first.message.content if isinstance(p, ProviderPart)] == [
        "U0lHLXRob3VnaHQ=",
        "U0lHLXRleHQ=",
        "U0lHLWNhbGw=",
    ]
    assert second.text == "Done."
    first_body, second_body = (r.json() for r in upstream.sent(STREAM))
    assert first_body["generationConfig"]["thinkingConfig"] == {"thinkingLevel": "HIGH", "includeThoughts": True}
    assert second_body["contents"][1] == {
        "role": "model",
        "parts": [
            {"text": "The user wants a lookup.", "thought": True, "thoughtSignature": "U0lHLXRob3VnaHQ="},
            {"text": "Let me look.", "thoughtSignature": "U0lHLXRleHQ="},
            {
                "functionCall": {"name": "lookup", "args": {"q": "x"}, "id": "call-g1"},
                "thoughtSignature": "U0lHLWNhbGw=",
            },
            {"functionCall": {"name": "lookup", "args": {"q": "y"}, "id": "call-g2"}},
        ],
    }
    assert second_body["contents"][2]["parts"] == [
        {"functionResponse": {"name": "lookup", "response": {"result": "X"}, "id": "call-g1"}},
        {"functionResponse": {"name": "lookup", "response": {"result": "Y"}, "id": "call-g2"}},
    ]


async def test_a_conversation_moves_openai_to_gemini_to_anthropic(start_daemon, upstream):
    daemon = await start_daemon(
        {
            "providers": {
                "gemini": {"base_url": upstream.base_url},
                "anthropic": {"base_url": upstream.base_url},
                "oai": {"type": "openai_compat", "base_url": upstream.base_url + "/v1", "api_key_env": "OAI_KEY"},
            }
        },
        env={"GEMINI_API_KEY": KEY, "ANTHROPIC_API_KEY": "fake-anthropic-key-0123456789", "OAI_KEY": "k"},
    )
    upstream.route(
        "POST",
        "/v1/chat/completions",
        Reply.json(
            {
                "id": "c1",
                "object": "chat.completion",
                "model": "gpt-test",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": "call_abc",
                                    "type": "function",
                                    "function": {"name": "lookup", "arguments": '{"q": "a"}'},
                                }
                            ],
                        },
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
            }
        ),
    )
    upstream.route(
        "POST",
        STREAM,
        Reply.sse(
            sse(
                chunk({"text": "Hmm.", "thought": True, "thoughtSignature": "R0VNLXNpZw=="}),
                chunk(
                    {"functionCall": {"name": "lookup", "args": {"q": "b"}}, "thoughtSignature": "R0VNLWNhbGw="},
                    finish="STOP",
                ),
            )
        ),
    )
    upstream.route(
        "POST",
        "/v1/messages",
        Reply.json(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "All found."}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 30, "output_tokens": 3},
            }
        ),
    )
    tools = [Tool(name="lookup", parameters={"type": "object", "properties": {"q": {"type": "string"}}})]
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            history = [Message.user("find a then b")]
            first = await client.complete("oai:gpt-test", history, tools=tools, session_id="m")
            history += [first.message, Message.tool_result(first.tool_calls[0].id, "A")]
            async with client.stream(FLASH, history, tools=tools, session_id="m") as stream:
                second = await stream.response()
            history += [second.message, Message.tool_result(second.tool_calls[0].id, "B")]
            third = await client.complete("anthropic:claude-sonnet-4-5", history, tools=tools, session_id="m")
    assert third.text == "All found."
    # on Gemini: the OpenAI call travels under its canonical id (valid everywhere) with the marker a
    # transplanted call needs, and its result names the function
    oai_call = first.tool_calls[0]
    assert oai_call.provider_id == "call_abc"
    gemini_body = upstream.sent(STREAM)[0].json()
    call_turn, result_turn = gemini_body["contents"][1], gemini_body["contents"][2]
    assert call_turn == {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "lookup", "args": {"q": "a"}, "id": oai_call.id},
                "thoughtSignature": "skip_thought_signature_validator",
            }
        ],
    }
    assert result_turn["parts"] == [
        {"functionResponse": {"name": "lookup", "response": {"result": "A"}, "id": oai_call.id}}
    ]
    # on Anthropic: every call has a valid id, each result finds its call, Gemini's signatures are gone
    anthropic_body = upstream.sent("/v1/messages")[0].json()
    uses = [b for m in anthropic_body["messages"] for b in m["content"] if b["type"] == "tool_use"]
    results = [b for m in anthropic_body["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert [u["name"] for u in uses] == ["lookup", "lookup"]
    assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses]
    assert uses[0]["id"] == oai_call.id and uses[1]["id"] == second.tool_calls[0].id
    assert "R0VN" not in json.dumps(anthropic_body)
    codes = {w.code for w in third.warnings}
    assert "provider_part_dropped" in codes and "thinking_dropped" in codes


async def test_a_safety_block(daemon, upstream):
    upstream.route(
        "POST",
        STREAM,
        Reply.sse(
            sse(
                chunk({"text": "I can"}),
                {
                    "candidates": [
                        {
                            "content": {"role": "model"},
                            "finishReason": "SAFETY",
                            "index": 0,
                            "safetyRatings": [
                                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
                            ],
                        }
                    ]
                },
            )
        ),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client, client.stream(FLASH, "something risky") as stream:
            response = await stream.response()
    assert response.finish_reason.reason == "content_filter" and response.finish_reason.raw == "SAFETY"
    assert response.text == "I can"
    assert any(w.code == "content_filter" and "HARM_CATEGORY_DANGEROUS_CONTENT" in w.message for w in response.warnings)


async def test_structured_output(daemon, upstream):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    # A whole response is streamed from Gemini all the same (a long answer is then
    # bounded by the idle timeout between chunks, not retried whole as a timeout).
    upstream.route(
        "POST",
        STREAM,
        Reply.sse(
            sse(
                {
                    "candidates": [
                        {"content": {"role": "model", "parts": [{"text": '{"city": "Paris"}'}]}, "finishReason": "STOP"}
                    ],
                    "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 5},
                }
            )
        ),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(
                Request(
                    model=FLASH,
                    messages=[Message.user("Capital of France?")],
                    response_format=ResponseFormat(kind="json_schema", schema=schema),
                )
            )
    assert json.loads(response.text) == {"city": "Paris"} and response.finish_reason.reason == "stop"
    body = upstream.sent(STREAM)[0].json()
    assert body["generationConfig"]["responseMimeType"] == "application/json"
    assert body["generationConfig"]["responseJsonSchema"] == schema
    assert response.cost_usd is not None and response.usage.total_tokens == 17


async def test_resource_exhausted_waits_the_retry_info_delay(daemon, upstream):
    retry_info = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.2s"}]
    upstream.route(
        "POST",
        STREAM,
        error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for requests per minute.", retry_info),
        Reply.sse(sse(chunk({"text": "Hello"}, finish="STOP"))),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            async with client.stream(FLASH, "hi") as stream:
                response = await stream.response()
            limited = None
            while limited is None:
                ev = await client.bus_events.receive()
                if ev.name == "llm.rate_limited":
                    limited = ev
    assert response.text == "Hello" and len(upstream.sent(STREAM)) == 2
    assert limited.wait_s == pytest.approx(0.2)


async def test_resource_exhausted_past_the_cap_is_returned_with_its_delay(daemon, upstream):
    retry_info = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3600s"}]
    upstream.route("POST", STREAM, error(429, "RESOURCE_EXHAUSTED", f"Quota exceeded (key {KEY})", retry_info))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(RateLimitError) as info:
                async with client.stream(FLASH, "hi") as stream:
                    await stream.response()
    assert info.value.retry_after == 3600 and info.value.code == "RESOURCE_EXHAUSTED"
    assert KEY not in str(info.value) and "[redacted]" in str(info.value)
    assert len(upstream.sent(STREAM)) == 1
    await daemon.stop()
    assert KEY not in daemon.output()


async def test_cancel_mid_stream_closes_the_upstream_connection(daemon, upstream):
    events = [
        sse(chunk({"text": "Once upon "})),
        sse(chunk({"text": "a time"})),
        sse(chunk({"text": " there"}, finish="STOP")),
    ]
    # two events, then silence with the connection open: only a cancel ends this request
    upstream.route("POST", STREAM, Reply(200, {"content-type": "text/event-stream"}, events, stall_after=2))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream(FLASH, "story") as stream:
                async for ev in stream:
                    if type(ev) is TextDelta:
                        await stream.cancel()
                response = await stream.response()
            await upstream.client_closed.wait()
    assert response.finish_reason.reason == "cancelled" and response.text.startswith("Once upon")


async def test_ready_asks_the_model_endpoint_with_the_key_in_a_header(daemon, upstream):
    upstream.route("GET", "/v1beta/models/gemini-3.8-flash", Reply.json({"name": "models/gemini-3.8-flash"}))
    upstream.route("GET", "/v1beta/models/gemini-nope", error(404, "NOT_FOUND", "models/gemini-nope is not found"))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            ok = await client.ready(FLASH)
            missing = await client.ready("gemini:gemini-nope")
    assert ok.ok and not missing.ok and missing.error.error_class == "not_found"
    got = upstream.sent("/v1beta/models/gemini-3.8-flash", method="GET")[0]
    assert got.headers["x-goog-api-key"] == KEY and "key=" not in got.path


async def test_google_api_key_is_the_fallback_name_and_gemini_base_url_is_honoured(start_daemon, upstream):
    daemon = await start_daemon(
        env={
            "GEMINI_API_KEY": "",
            "GOOGLE_API_KEY": "gk-test-google-fallback-key-000000",
            "GEMINI_BASE_URL": upstream.base_url,
        }
    )
    upstream.route("POST", STREAM, Reply.sse(sse(chunk({"text": "ok"}, finish="STOP"))))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            assert (await client.complete(FLASH, "hi")).text == "ok"
    assert upstream.sent(STREAM)[0].headers["x-goog-api-key"] == "gk-test-google-fallback-key-000000"


async def test_without_either_key_gemini_is_not_configured(start_daemon):
    from trunkline.errors import NotConfiguredError

    daemon = await start_daemon(env={"GEMINI_API_KEY": "", "GOOGLE_API_KEY": ""})
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(NotConfiguredError, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
                await client.complete(FLASH, "hi")


async def test_count_tokens_asks_gemini_and_falls_back_to_the_estimate(daemon, upstream):
    path = "/v1beta/models/gemini-3.8-flash:countTokens"
    upstream.route(
        "POST",
        path,
        Reply.json({"totalTokens": 1234, "promptTokensDetails": []}),
        error(503, "UNAVAILABLE", "try later"),
    )
    request = Request(
        model=FLASH,
        messages=[Message.system("Be brief."), Message.user("How many tokens?")],
        tools=[Tool(name="lookup")],
    )
    upstream.route("GET", "/v1beta/models/gemini-3.8-flash", Reply.json({"name": "models/gemini-3.8-flash"}))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            assert (await client.ready(FLASH)).ok  # the worker is up: a count is not answered by the daemon alone
            exact = await client.count_tokens(request)
            estimated = await client.count_tokens(request)
    assert (exact.input_tokens, exact.exact) == (1234, True)
    assert not estimated.exact and 0 < estimated.input_tokens < 100
    sent = upstream.sent(path)[0]
    assert sent.headers["x-goog-api-key"] == KEY
    assert sent.json() == {
        "generateContentRequest": {
            "model": "models/gemini-3.8-flash",
            "contents": [{"role": "user", "parts": [{"text": "How many tokens?"}]}],
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": "lookup", "parametersJsonSchema": {"type": "object", "properties": {}}}
                    ]
                }
            ],
        }
    }


async def test_a_long_generation_is_followed_across_two_continuations(daemon, upstream):
    path = "/v1beta/models/gemini-4-argon:streamGenerateContent"

    def hop(texts: list[str], finish: str, token: str | None, out: int) -> Reply:
        chunks = [chunk({"text": t}, model="gemini-4-argon") for t in texts]
        last = chunks[-1]["candidates"][0]
        last["finishReason"] = finish
        if token:
            last["continuationToken"] = token
        chunks[-1]["usageMetadata"] = {"promptTokenCount": 50, "candidatesTokenCount": out, "thoughtsTokenCount": 5}
        return Reply.sse(sse(*chunks), chunk_size=29)

    upstream.route(
        "POST",
        path,
        hop(["Part one, ", "still one; "], "CONTINUATION", "Y29udC0x", 65536),
        hop(["part two; "], "CONTINUATION", "Y29udC0y", 65536),
        hop(["the end."], "STOP", None, 1000),
    )
    request = Request(
        model="gemini:gemini-4-argon", messages=[Message.user("Write a very long story.")], max_tokens=200_000
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream(request) as stream:
                async for ev in stream:
                    events.append(ev)
            from trunkline.errors import InvalidRequestError

            with pytest.raises(InvalidRequestError, match="max_tokens 200000 exceeds"):
                await client.complete(Request(model=FLASH, messages=[Message.user("x")], max_tokens=200_000))
    check_invariants(events)
    response = events[-1].response
    # one uninterrupted answer: one text part, whose deltas run on across the hops
    assert [type(p).__name__ for p in response.message.content] == ["TextPart"]
    assert response.text == "Part one, still one; part two; the end."
    assert response.finish_reason.reason == "stop"
    u = response.usage
    assert (u.input_tokens, u.output_tokens, u.reasoning_tokens) == (150, 65536 * 2 + 1000 + 15, 15)
    first, second, third = (r.json() for r in upstream.sent(path))
    assert "continuationToken" not in first and first["generationConfig"]["maxOutputTokens"] == 200_000
    assert second["continuationToken"] == "Y29udC0x" and third["continuationToken"] == "Y29udC0y"
    # the same request each time: the budget is cumulative, the conversation unchanged
    assert {k: v for k, v in second.items() if k != "continuationToken"} == first
