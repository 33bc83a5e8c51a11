"""OpenAI Responses end to end: the real daemon, real sockets, the real client, a fake
Responses server (and a fake Anthropic, for a conversation that moves) on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
import trio

from fakes import openai_responses as oa
from fakes.upstream import FakeUpstream, Reply
from helpers import REPO, check_invariants
from trunkline import Client, Message, Tool
from trunkline.errors import InvalidRequestError, QuotaExceededError
from trunkline.protocol.messages import (
    AudioPart,
    ProviderPart,
    ReasoningDelta,
    ResponseFormat,
    TextDelta,
    ThinkingPart,
    ToolCallDelta,
    ToolCallPart,
)

pytestmark = pytest.mark.e2e

KEY = "sk-openai-test-key-never-to-be-seen-0123456789"
MODEL = "openai:gpt-5"
RESPONSES = "/v1/responses"
ANTHROPIC = REPO / "cassettes" / "anthropic"
WEATHER = Tool(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
CLOCK = Tool(name="current_time")
LOOKUP = Tool(name="lookup", parameters={"type": "object", "properties": {"q": {"type": "string"}}})


def stream_reply(items, **kwargs) -> Reply:
    return Reply.sse(oa.sse(oa.events(items, **kwargs)), chunk_size=97)


def error_reply(status: int, error: dict, headers: dict | None = None) -> Reply:
    return Reply(
        status, {"content-type": "application/json", **(headers or {})}, [json.dumps({"error": error}).encode()]
    )


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    # The default `openai` provider, pointed at the fake through the SDK's own variables.
    return await start_daemon(
        {"providers": {"anthropic": {"base_url": upstream.base_url}}},
        env={
            "OPENAI_API_KEY": KEY,
            "OPENAI_BASE_URL": upstream.base_url + "/v1",
            "OPENAI_ORG_ID": "org-test",
            "OPENAI_PROJECT_ID": "proj_test",
            "ANTHROPIC_API_KEY": "fake-anthropic-key-0123456789",
        },
    )


async def test_reasoning_is_reported_and_its_encrypted_item_goes_back_next_turn(daemon, upstream):
    thought = oa.reasoning("rs_A", ["Adding the numbers.", "Checking twice."], encrypted="gAAAAB-secret-thoughts")
    upstream.route(
        "POST",
        RESPONSES,
        stream_reply([thought, oa.message("msg_A", "2 + 2 = 4 — sure.", phase="final_answer")]),
        stream_reply([oa.message("msg_B", "And 6.")], response_id="resp_2"),
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            history = [Message.system("Be exact."), Message.user("2+2?")]
            events = []
            async with client.stream(MODEL, history, reasoning_effort="high") as stream:
                async for ev in stream:
                    events.append(ev)
            check_invariants(events)
            first = events[-1].response
            history += [first.message, Message.user("and 3+3?")]
            second = await client.complete(MODEL, history, reasoning_effort="high")
    assert first.text == "2 + 2 = 4 — sure."
    assert [p.text for p in first.message.content if isinstance(p, ThinkingPart)] == [
        "Adding the numbers.",
        "Checking twice.",
    ]
    assert "".join(e.text for e in events if type(e) is ReasoningDelta) == "Adding the numbers.Checking twice."
    u = first.usage
    assert (u.input_tokens, u.output_tokens, u.reasoning_tokens, u.cache_read_tokens) == (120, 80, 48, 64)
    assert first.cost_usd is not None and first.provider == "openai"
    assert second.text == "And 6." and second.finish_reason.reason == "stop"
    sent1, sent2 = upstream.sent(RESPONSES)
    assert sent1.headers["authorization"] == f"Bearer {KEY}"
    assert sent1.headers["openai-organization"] == "org-test" and sent1.headers["openai-project"] == "proj_test"
    body1 = sent1.json()
    assert body1["store"] is False and body1["include"] == ["reasoning.encrypted_content"]
    assert body1["reasoning"] == {"effort": "high", "summary": "auto"} and body1["instructions"] == "Be exact."
    assert body1["stream"] is True
    body2 = sent2.json()
    assert body2["stream"] is True  # a whole response is streamed from OpenAI all the same
    assert body2["input"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "2+2?"}]},
        thought,  # byte for byte: original id, summary and encrypted content
        {"type": "message", "role": "assistant", "content": "2 + 2 = 4 — sure.", "phase": "final_answer"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and 3+3?"}]},
    ]
    assert second.warnings == []


async def test_parallel_function_calls_stream_and_their_results_go_back(daemon, upstream):
    calls = [
        oa.function_call("fc_1", "call_Paris", "get_weather", {"city": "Paris"}),
        oa.function_call("fc_2", "call_Clock", "current_time", {}),
    ]
    upstream.route("POST", RESPONSES, stream_reply(calls), stream_reply([oa.message("msg_1", "18°C at noon.")]))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            history = [Message.user("Weather and time in Paris?")]
            events = []
            async with client.stream(MODEL, history, tools=[WEATHER, CLOCK], session_id="s1") as stream:
                async for ev in stream:
                    events.append(ev)
            check_invariants(events)
            first = events[-1].response
            paris, clock = first.tool_calls
            history += [first.message, Message.tool_result(paris.id, "18°C"), Message.tool_result(clock.id, "noon")]
            async with client.stream(MODEL, history, tools=[WEATHER, CLOCK], session_id="s1") as stream:
                second = await stream.response()
    assert first.finish_reason.reason == "tool_calls"
    assert [(c.name, c.arguments, c.provider_id) for c in first.tool_calls] == [
        ("get_weather", {"city": "Paris"}, "call_Paris"),
        ("current_time", {}, "call_Clock"),
    ]
    assert all(c.id.startswith("tu_") for c in first.tool_calls)
    assert (
        "".join(e.partial_json for e in events if type(e) is ToolCallDelta and e.id == paris.id) == '{"city": "Paris"}'
    )
    assert second.text == "18°C at noon."
    body = upstream.sent(RESPONSES)[1].json()
    assert body["input"][1:] == [
        {"type": "function_call", "call_id": "call_Paris", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "call_Clock", "name": "current_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_Paris", "output": "18°C"},
        {"type": "function_call_output", "call_id": "call_Clock", "output": "noon"},
    ]
    assert body["tools"][0] == {
        "type": "function",
        "name": "get_weather",
        "strict": False,
        "parameters": WEATHER.parameters,
    }


async def test_a_conversation_moves_anthropic_openai_anthropic(daemon, upstream):
    upstream.route(
        "POST",
        "/v1/messages",
        Reply.sse((ANTHROPIC / "thinking.sse").read_bytes()),
        Reply.sse((ANTHROPIC / "tools-parallel.sse").read_bytes()),
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
    upstream.route(
        "POST",
        RESPONSES,
        stream_reply(
            [
                oa.reasoning("rs_O", ["Need a lookup."]),
                oa.function_call("fc_O", "call_Lookup", "lookup", {"q": "Paris"}),
            ]
        ),
    )
    tools = [WEATHER, CLOCK, LOOKUP]
    claude = "anthropic:claude-sonnet-4-5"
    with trio.fail_after(40):
        async with Client(daemon.runtime_dir) as client:
            history = [Message.user("2+2?")]
            async with client.stream(claude, history, tools=tools, session_id="move") as stream:
                a1 = await stream.response()
            history += [a1.message, Message.user("weather and time?")]
            async with client.stream(claude, history, tools=tools, session_id="move") as stream:
                a2 = await stream.response()
            paris, clock = a2.tool_calls
            history += [a2.message, Message.tool_result(paris.id, "18°C"), Message.tool_result(clock.id, "noon")]
            async with client.stream(MODEL, history, tools=tools, session_id="move") as stream:
                o1 = await stream.response()
            (lookup,) = o1.tool_calls
            history += [o1.message, Message.tool_result(lookup.id, "found")]
            a3 = await client.complete(claude, history, tools=tools, session_id="move")
    assert a3.text == "Done."
    # On OpenAI: Anthropic's thinking is dropped with a warning; its calls carry ids OpenAI accepts,
    # and every result answers a call of the same id.
    assert {w.code for w in o1.warnings} == {"thinking_dropped"}
    body = upstream.sent(RESPONSES)[0].json()
    sent_calls = [i["call_id"] for i in body["input"] if i["type"] == "function_call"]
    sent_results = [i["call_id"] for i in body["input"] if i["type"] == "function_call_output"]
    assert sent_calls == sent_results == [paris.id, clock.id]  # canonical ids: valid on OpenAI
    assert not any(i["type"] == "reasoning" for i in body["input"])
    assert lookup.provider_id == "call_Lookup" and lookup.id.startswith("tu_")
    # Back on Anthropic: its own thinking and ids come back verbatim; OpenAI's reasoning is dropped
    # with a warning (its summary as thinking, its opaque item too where the Anthropic translator
    # says so); OpenAI's call goes as a tool_use with an id Anthropic accepts.
    codes = {w.code for w in a3.warnings}
    assert "thinking_dropped" in codes and codes <= {"thinking_dropped", "provider_part_dropped"}
    last = upstream.sent("/v1/messages")[-1].json()
    blocks = [b for m in last["messages"] for b in m["content"]]
    assert [b["id"] for b in blocks if b["type"] == "tool_use"] == ["toolu_01Paris", "toolu_02Clock", lookup.id]
    assert [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"] == [
        "toolu_01Paris",
        "toolu_02Clock",
        lookup.id,
    ]
    assert [b["type"] for b in blocks if b["type"] in ("thinking", "redacted_thinking")] == [
        "thinking",
        "redacted_thinking",
    ]
    assert "Need a lookup." not in json.dumps(last)


async def test_structured_output(daemon, upstream):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "temp_c": {"type": "number"}},
        "required": ["city", "temp_c"],
        "additionalProperties": False,
    }
    upstream.route("POST", RESPONSES, stream_reply([oa.message("msg_1", '{"city":"Paris","temp_c":18}')]))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(
                MODEL,
                "Weather in Paris as JSON",
                response_format=ResponseFormat(kind="json_schema", name="weather", schema=schema, strict=True),
            )
    assert json.loads(response.text) == {"city": "Paris", "temp_c": 18}
    body = upstream.sent(RESPONSES)[0].json()
    assert body["text"] == {"format": {"type": "json_schema", "name": "weather", "schema": schema, "strict": True}}


async def test_an_error_inside_a_200_stream(daemon, upstream):
    payloads = oa.events([oa.message("msg_1", "Partial answer that will not finish")])[:6]
    failure = [
        {
            "type": "error",
            "code": "insufficient_quota",
            "message": "You exceeded your current quota.",
            "param": None,
            "sequence_number": 6,
        },
        {
            "type": "response.failed",
            "sequence_number": 7,
            "response": {
                "id": "resp_1",
                "status": "failed",
                "error": {"code": "insufficient_quota", "message": "You exceeded your current quota."},
            },
        },
    ]
    upstream.route("POST", RESPONSES, Reply.sse(oa.sse(payloads + failure), chunk_size=61))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream(MODEL, "hi") as stream:
                async for ev in stream:
                    events.append(ev)
                with pytest.raises(QuotaExceededError) as info:
                    await stream.response()
    check_invariants(events)
    assert any(type(ev) is TextDelta for ev in events)  # it failed mid-way, after text had gone out
    error = events[-1].error
    assert error.error_class == "quota_exceeded" and error.provider_code == "insufficient_quota"
    assert "exceeded your current quota" in str(info.value) and not info.value.retryable
    assert events[-1].partial.text == "Partial answer that will"  # the two deltas that arrived
    assert len(upstream.sent(RESPONSES)) == 1  # the stream had begun, and quota is not retryable anyway


async def test_429_waits_for_retry_after_and_reports_the_rate_limit(daemon, upstream):
    limits = {
        "x-ratelimit-limit-requests": "500",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "120ms",
        "x-ratelimit-limit-tokens": "30000",
        "x-ratelimit-remaining-tokens": "29000",
        "x-ratelimit-reset-tokens": "2s",
    }
    upstream.route(
        "POST",
        RESPONSES,
        error_reply(
            429,
            {
                "message": "Rate limit reached for requests",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            },
            {"retry-after": "0.1", **limits},
        ),
        Reply(
            200,
            {"content-type": "text/event-stream", **limits, "x-ratelimit-remaining-requests": "499"},
            [oa.sse(oa.events([oa.message("msg_1", "Hello.")]))],
        ),
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            async with client.stream(MODEL, "hi") as stream:
                response = await stream.response()
            limited = None
            while limited is None:
                ev = await client.bus_events.receive()
                if ev.name == "llm.rate_limited":
                    limited = ev
    assert response.text == "Hello."
    assert limited.wait_s == pytest.approx(0.1) and limited.error_class == "rate_limit"
    rl = response.rate_limit
    assert (rl.requests_limit, rl.requests_remaining, rl.tokens_remaining, rl.tokens_reset_s) == (500, 499, 29000, 2.0)
    first, second = upstream.sent(RESPONSES)
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]


async def test_cancel_mid_function_call_closes_the_upstream(daemon, upstream):
    payloads = oa.events([oa.function_call("fc_1", "call_1", "lookup", {"q": "a long query about Paris"})])
    upstream.route(
        "POST",
        RESPONSES,
        Reply(200, {"content-type": "text/event-stream"}, [oa.sse([p]) for p in payloads], stall_after=5),
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream(MODEL, "look it up", tools=[LOOKUP]) as stream:
                async for ev in stream:
                    if type(ev) is ToolCallDelta:
                        await stream.cancel()
                response = await stream.response()
            await upstream.client_closed.wait()
    assert response.finish_reason.reason == "cancelled"
    (call,) = response.tool_calls
    assert isinstance(call, ToolCallPart) and call.name == "lookup" and call.provider_id == "call_1"
    assert call.raw_arguments and '{"q": "a long query about Paris"}'.startswith(call.raw_arguments)


async def test_audio_is_refused_before_any_call(daemon, upstream):
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(InvalidRequestError, match="audio"):
                await client.complete(MODEL, [Message.user("listen", AudioPart(data="UklG", media_type="audio/wav"))])
    assert upstream.sent(RESPONSES) == []


async def test_built_in_tool_items_reach_the_client_as_provider_parts(daemon, upstream):
    search = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "Paris weather"},
    }
    upstream.route("POST", RESPONSES, stream_reply([search, oa.message("msg_1", "Sunny.")]))
    with trio.fail_after(30):
        async with (
            Client(daemon.runtime_dir) as client,
            client.stream(
                MODEL, "Weather?", provider_options={"openai": {"tools": [{"type": "web_search"}]}}
            ) as stream,
        ):
            response = await stream.response()
    assert response.tool_calls == [] and response.text == "Sunny."
    assert response.message.content[0] == ProviderPart(
        api="openai", kind="web_search_call", data=search, provider="openai"
    )
    assert upstream.sent(RESPONSES)[0].json()["tools"] == [{"type": "web_search"}]


async def test_ready_asks_for_the_model(daemon, upstream):
    upstream.route("GET", "/v1/models/gpt-5", Reply.json({"id": "gpt-5", "object": "model"}))
    upstream.route(
        "GET",
        "/v1/models/gpt-nope",
        error_reply(
            404,
            {
                "message": "The model 'gpt-nope' does not exist",
                "type": "invalid_request_error",
                "param": None,
                "code": "model_not_found",
            },
        ),
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            ok = await client.ready(MODEL)
            missing = await client.ready("gpt-nope", provider="openai")
    assert ok.ok and not missing.ok and missing.error.error_class == "not_found"
    assert upstream.sent("/v1/models/gpt-5", "GET")[0].headers["authorization"] == f"Bearer {KEY}"


async def test_count_tokens_asks_openai_and_falls_back_to_the_estimate(daemon, upstream):
    upstream.route(
        "POST",
        "/v1/responses/input_tokens",
        Reply.json({"object": "response.input_tokens", "input_tokens": 1234}),
        error_reply(404, {"message": "Not found", "type": "invalid_request_error", "code": None}),
    )
    upstream.route("GET", "/v1/models/gpt-5", Reply.json({"id": "gpt-5", "object": "model"}))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            assert (await client.ready(MODEL)).ok  # the worker is up: counts go to it, not to the daemon's estimate
            counted = await client.count_tokens(
                MODEL,
                [Message.system("Be brief."), Message.user("hello there")],
                tools=[LOOKUP],
                reasoning_effort="low",
            )
            estimated = await client.count_tokens(MODEL, "hello there")
    assert (counted.input_tokens, counted.exact) == (1234, True)
    assert not estimated.exact and 0 < estimated.input_tokens < 50
    body = upstream.sent("/v1/responses/input_tokens")[0].json()
    assert body["model"] == "gpt-5" and body["instructions"] == "Be brief."
    assert body["tools"][0]["name"] == "lookup" and body["reasoning"]["effort"] == "low"
    assert not {"stream", "store", "include", "max_output_tokens"} & set(body)


async def test_a_dropped_background_stream_is_resumed_with_nothing_lost_or_repeated(daemon, upstream):
    text = "Background answers survive a dropped connection, every word of them."
    payloads = oa.events([oa.reasoning("rs_bg", ["Planning."]), oa.message("msg_bg", text)], response_id="resp_bg")
    for p in payloads[:2]:
        p["response"]["background"] = True
    cut = 12  # the connection drops after this many events (mid-way through the text)
    first = Reply(200, {"content-type": "text/event-stream"}, [oa.sse([p]) for p in payloads], disconnect_after=cut)
    # The resumed stream overlaps what already arrived by two events: they must not be repeated.
    rest = Reply.sse(oa.sse(payloads[cut - 2 :]), chunk_size=53)
    upstream.route("POST", RESPONSES, first)
    upstream.route("GET", "/v1/responses/resp_bg", rest)
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream(MODEL, "go", provider_options={"openai": {"background": True}}) as stream:
                async for ev in stream:
                    events.append(ev)
    check_invariants(events)
    response = events[-1].response
    assert response.text == text and "".join(e.text for e in events if type(e) is TextDelta) == text
    assert [p.text for p in response.message.content if isinstance(p, ThinkingPart)] == ["Planning."]
    assert response.finish_reason.reason == "stop" and response.usage.output_tokens == 80
    assert [w.code for w in response.warnings] == ["stream_resumed"]
    body = upstream.sent(RESPONSES)[0].json()
    assert body["background"] is True and body["store"] is True and body["stream"] is True
    (resume,) = upstream.sent("/v1/responses/resp_bg", "GET")
    assert resume.path == f"/v1/responses/resp_bg?stream=true&starting_after={cut - 1}"
    assert resume.headers["authorization"] == f"Bearer {KEY}"


async def test_cancelling_a_background_response_cancels_it_at_openai(daemon, upstream):
    payloads = oa.events(
        [oa.message("msg_bg", "A long answer that the client will not wait for.")], response_id="resp_bg"
    )
    upstream.route(
        "POST",
        RESPONSES,
        Reply(200, {"content-type": "text/event-stream"}, [oa.sse([p]) for p in payloads], stall_after=6),
    )
    upstream.route("POST", "/v1/responses/resp_bg/cancel", Reply.json({"id": "resp_bg", "status": "cancelled"}))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream(MODEL, "go", provider_options={"openai": {"background": True}}) as stream:
                async for ev in stream:
                    if type(ev) is TextDelta:
                        await stream.cancel()
                response = await stream.response()
            while not upstream.sent("/v1/responses/resp_bg/cancel"):
                await upstream.request_seen.wait()
                upstream.request_seen = trio.Event()
    assert response.finish_reason.reason == "cancelled"
    assert upstream.sent("/v1/responses/resp_bg/cancel")[0].headers["authorization"] == f"Bearer {KEY}"


async def test_a_dropped_stream_without_background_fails_with_its_partial(daemon, upstream):
    payloads = oa.events([oa.message("msg_1", "This answer will be cut short by the network.")])
    upstream.route(
        "POST",
        RESPONSES,
        Reply(200, {"content-type": "text/event-stream"}, [oa.sse([p]) for p in payloads], disconnect_after=6),
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream(MODEL, "go") as stream:
                async for ev in stream:
                    events.append(ev)
    check_invariants(events)
    assert events[-1].error.error_class == "network" and events[-1].partial.text
    assert upstream.sent("/v1/responses/resp_1", "GET") == []


async def test_a_second_instance_runs_beside_the_default_one(start_daemon, upstream):
    upstream.route("POST", "/proxy/v1/responses", stream_reply([oa.message("msg_p", "via the proxy")]))
    upstream.route("POST", RESPONSES, stream_reply([oa.message("msg_d", "direct")]))
    daemon = await start_daemon(
        {
            "providers": {
                "proxy": {"type": "openai", "api_key_env": "PROXY_KEY", "base_url": upstream.base_url + "/proxy/v1"}
            }
        },
        env={"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": upstream.base_url + "/v1", "PROXY_KEY": "proxy-key-0123456789"},
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream("gpt-5", "hi", provider="proxy") as stream:
                proxied = await stream.response()
            async with client.stream(MODEL, "hi") as stream:
                direct = await stream.response()
    assert (proxied.text, proxied.provider, direct.text, direct.provider) == (
        "via the proxy",
        "proxy",
        "direct",
        "openai",
    )
    assert upstream.sent("/proxy/v1/responses")[0].headers["authorization"] == "Bearer proxy-key-0123456789"
    assert "openai-organization" not in upstream.sent("/proxy/v1/responses")[0].headers


async def test_without_a_key_openai_is_not_configured(start_daemon):
    from trunkline.errors import NotConfiguredError

    daemon = await start_daemon(env={"OPENAI_API_KEY": ""})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(NotConfiguredError, match="OPENAI_API_KEY"):
                await client.complete(MODEL, "hi")
            status = {w.provider: w.state for w in (await client.status()).workers}
    assert status["openai"] == "not_configured"


async def test_a_non_streamed_background_response_is_polled_until_done(daemon, upstream):
    done = oa.body([oa.message("msg_bg", "Finished in the background.")], response_id="resp_bg")
    upstream.route("POST", RESPONSES, Reply.json({**done, "status": "queued", "output": [], "usage": None}))
    upstream.route(
        "GET", "/v1/responses/resp_bg", Reply.json({**done, "status": "in_progress", "output": []}), Reply.json(done)
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(MODEL, "go", provider_options={"openai": {"background": True}})
    assert response.text == "Finished in the background." and response.usage.output_tokens == 80
    assert len(upstream.sent("/v1/responses/resp_bg", "GET")) == 2
    assert upstream.sent(RESPONSES)[0].json()["background"] is True


async def test_a_background_response_is_polled_and_cancelled_with_the_key_that_made_it(start_daemon, upstream):
    # Two keys (of two projects, say): a response made with the second is invisible to
    # the first, so its polls and its cancel carry the second too.
    second = "sk-openai-second-key-never-seen-9876543210"
    daemon = await start_daemon(
        {"providers": {"openai": {"base_url": upstream.base_url + "/v1", "keys_env": ["TL_OA_A", "TL_OA_B"]}}},
        env={"TL_OA_A": KEY, "TL_OA_B": second},
    )
    done = oa.body([oa.message("msg_bg", "Finished in the background.")], response_id="resp_bg")
    upstream.route(
        "POST",
        RESPONSES,
        Reply.json(done),
        Reply.json({**done, "status": "queued", "output": [], "usage": None}),
        Reply.json(done),
        Reply(
            200,
            {"content-type": "text/event-stream"},
            [
                oa.sse([p])
                for p in oa.events(
                    [oa.message("msg_c", "A long answer that the client will not wait for.")], response_id="resp_c"
                )
            ],
            stall_after=6,
        ),
    )
    upstream.route(
        "GET", "/v1/responses/resp_bg", Reply.json({**done, "status": "in_progress", "output": []}), Reply.json(done)
    )
    upstream.route("POST", "/v1/responses/resp_c/cancel", Reply.json({"id": "resp_c", "status": "cancelled"}))
    background = {"provider_options": {"openai": {"background": True}}}
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            await client.complete(MODEL, "first key")
            response = await client.complete(MODEL, "second key", **background)
            await client.complete(MODEL, "first key again")
            async with client.stream(MODEL, "second key again", **background) as stream:
                async for ev in stream:
                    if type(ev) is TextDelta:
                        await stream.cancel()
            while not upstream.sent("/v1/responses/resp_c/cancel"):
                await upstream.request_seen.wait()
                upstream.request_seen = trio.Event()
    assert response.text == "Finished in the background."
    bearer = lambda r: r.headers["authorization"]  # noqa: E731 - a one-line reader, used four times below
    assert [bearer(r) for r in upstream.sent(RESPONSES)] == [f"Bearer {k}" for k in (KEY, second, KEY, second)]
    assert [bearer(r) for r in upstream.sent("/v1/responses/resp_bg", "GET")] == [f"Bearer {second}"] * 2
    assert [bearer(r) for r in upstream.sent("/v1/responses/resp_c/cancel")] == [f"Bearer {second}"]
