"""Answers real servers give that a strict reader would refuse, end to end: the real
daemon, real sockets and the real client against fake upstreams on 127.0.0.1.

Gemini's stream without `alt=sse` (one JSON array, or one object) as
`application/json`; a whole JSON body for a streamed request (a compatible
server that ignores `stream: true`); a gateway's 504; tool arguments that are not
JSON; and a resumed OpenAI background stream held to the same bounds as the first.
"""

from __future__ import annotations

import json

import pytest
import trio

from fakes import openai_responses as oa
from fakes.gemini_stream import chunk
from fakes.upstream import FakeUpstream, Reply
from helpers import check_invariants
from trunkline import Client, Message, Tool, generate
from trunkline.protocol.messages import ErrorEvent, Finish, TextDelta, ToolCallEnd, ToolCallPart

pytestmark = pytest.mark.e2e

GEMINI_KEY = "gk-test-fake-gemini-key-never-to-be-seen-0123"
OPENAI_KEY = "sk-openai-test-key-never-to-be-seen-0123456789"
GEMINI_STREAM = "/v1beta/models/gemini-3.8-flash:streamGenerateContent"
CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"


def json_reply(body: object, status: int = 200, pieces: int = 1) -> Reply:
    data = json.dumps(body).encode()
    size = -(-len(data) // pieces)
    return Reply(status, {"content-type": "application/json"}, [data[i : i + size] for i in range(0, len(data), size)])


def chat_completion(content: str | None, tool_calls: list | None = None, finish: str = "stop") -> Reply:
    message: dict = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return json_reply(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "local-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
        }
    )


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    return await start_daemon(
        {
            "providers": {
                "gemini": {"base_url": upstream.base_url},
                "local": {"type": "openai_compat", "base_url": upstream.base_url + "/v1"},
            },
            "limits": {"max_response_bytes": 64 * 1024},
        },
        env={
            "GEMINI_API_KEY": GEMINI_KEY,
            "GOOGLE_API_KEY": "",
            "OPENAI_API_KEY": OPENAI_KEY,
            "OPENAI_BASE_URL": upstream.base_url + "/v1",
        },
    )


async def test_gemini_streams_sent_as_application_json_are_read(daemon, upstream):
    usage = {"promptTokenCount": 5, "candidatesTokenCount": 4, "totalTokenCount": 9}
    array = [chunk({"text": "Bonjour, "}), chunk({"text": "le monde."}, finish="STOP", usage=usage)]
    upstream.route(
        "POST",
        GEMINI_STREAM,
        json_reply(array, pieces=7),  # the JSON-array stream, cut anywhere
        json_reply(chunk({"text": "Tout entier."}, finish="STOP", usage=usage)),
    )  # one whole object
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream("gemini:gemini-3.8-flash", "Say hello") as stream:
                async for ev in stream:
                    events.append(ev)
            whole = await client.complete("gemini:gemini-3.8-flash", "Say it whole")
    check_invariants(events)
    assert [e.text for e in events if type(e) is TextDelta] == ["Bonjour, ", "le monde."]
    assert events[-1].response.text == "Bonjour, le monde." and events[-1].response.usage.output_tokens == 4
    assert whole.text == "Tout entier." and whole.finish_reason.reason == "stop"


async def test_a_whole_json_answer_to_a_streamed_openai_request_is_taken_both_ways(daemon, upstream):
    body = {
        "id": "resp_whole",
        "object": "response",
        "status": "completed",
        "model": "gpt-5",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "No stream here.", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "lookup",
                "arguments": '{"q": "x"}',
                "status": "completed",
            },
        ],
        "usage": {"input_tokens": 7, "output_tokens": 5, "total_tokens": 12},
    }
    upstream.route("POST", RESPONSES, json_reply(body), json_reply(body))
    lookup = Tool(name="lookup", parameters={"type": "object", "properties": {"q": {"type": "string"}}})
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            whole = await client.complete("openai:gpt-5", "hi", tools=[lookup])
            events = []
            async with client.stream("openai:gpt-5", "hi", tools=[lookup]) as stream:
                async for ev in stream:
                    events.append(ev)
    assert upstream.sent(RESPONSES)[0].json()["stream"] is True
    for response in (whole, events[-1].response):
        assert response.text == "No stream here." and response.usage.output_tokens == 5
        (call,) = response.tool_calls
        assert (call.name, call.arguments, call.provider_id) == ("lookup", {"q": "x"}, "call_1")
        assert response.finish_reason.reason == "tool_calls"
    check_invariants(events)
    assert "".join(e.text for e in events if type(e) is TextDelta) == "No stream here."
    assert [e.provider_id for e in events if type(e) is ToolCallEnd] == ["call_1"]


async def test_a_gateway_timeout_is_a_server_error_and_is_retried(daemon, upstream):
    gateway = Reply(504, {"content-type": "text/html"}, [b"<html>504 Gateway Time-out</html>"])
    upstream.route("POST", CHAT, gateway, chat_completion("Second time lucky."))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete("local:local-model", "hi")
    assert response.text == "Second time lucky."
    assert len(upstream.sent(CHAT)) == 2  # the 504 was retried, not reported as our own timeout


async def test_tool_arguments_that_are_not_json_get_an_error_result_and_the_loop_goes_on(daemon, upstream):
    calls = []

    def lookup(q: str) -> str:
        calls.append(q)
        return f"found {q}"

    bad = [{"id": "call_bad", "type": "function", "function": {"name": "lookup", "arguments": '{"q": trunk'}}]
    upstream.route("POST", CHAT, chat_completion(None, bad, "tool_calls"), chat_completion("Sorry, fixed."))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            result = await generate(
                "local:local-model",
                "look up trunk",
                tools=[
                    Tool(
                        name="lookup",
                        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
                        execute=lookup,
                    )
                ],
                max_tool_rounds=2,
                client=client,
            )
    first = result.steps[0].response
    (call,) = first.tool_calls
    assert call.arguments is None and call.raw_arguments == '{"q": trunk'
    assert [w.code for w in first.warnings] == ["tool_arguments_invalid"]
    assert calls == []  # the tool never ran with arguments it could not have
    assert result.text == "Sorry, fixed."
    answer = upstream.sent(CHAT)[1].json()["messages"][-1]
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_bad"
    assert "not a JSON object" in answer["content"]


async def test_a_resumed_background_stream_is_read_within_the_response_limit(daemon, upstream):
    payloads = oa.events([oa.message("msg_bg", "A background answer.")], response_id="resp_bg")
    for p in payloads[:2]:
        p["response"]["background"] = True
    cut = 4
    first = Reply(200, {"content-type": "text/event-stream"}, [oa.sse([p]) for p in payloads], disconnect_after=cut)
    # The resumed stream goes on and on (comment lines carry no event): past
    # limits.max_response_bytes the read stops, however the stream got there.
    endless = Reply.sse(oa.sse(payloads[cut : cut + 1]) + (b": padding " + b"x" * 1000 + b"\n") * 200, chunk_size=4096)
    upstream.route("POST", RESPONSES, first)
    upstream.route("GET", "/v1/responses/resp_bg", endless)
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream("openai:gpt-5", "go", provider_options={"openai": {"background": True}}) as s:
                async for ev in s:
                    events.append(ev)
    check_invariants(events)
    last = events[-1]
    assert type(last) is ErrorEvent and last.error.error_class == "invalid_response"
    assert "max_response_bytes" in last.error.message
    assert type(last) is not Finish and last.partial is not None


async def test_a_tool_history_without_tools_is_sent_to_anthropic_in_a_form_it_accepts(start_daemon, upstream):
    daemon = await start_daemon(
        {"providers": {"anthropic": {"base_url": upstream.base_url}}},
        env={"ANTHROPIC_API_KEY": "fake-anthropic-key-0123456789"},
    )
    upstream.route(
        "POST",
        "/v1/messages",
        json_reply(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "Paris is mild."}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 30, "output_tokens": 4},
            }
        ),
    )
    call = ToolCallPart(id="tu_01A", name="get_weather", arguments={"city": "Paris"}, provider_id="call_from_openai")
    history = [
        Message.user("Weather in Paris?"),
        Message(role="assistant", content=[call]),
        Message.tool_result("tu_01A", "18°C"),
        Message.user("Summarise in three words."),
    ]
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete("anthropic:claude-sonnet-4-5", history)
    assert response.text == "Paris is mild."
    assert [w.code for w in response.warnings] == ["tools_from_history"]
    sent = upstream.sent("/v1/messages")[0].json()
    assert [t["name"] for t in sent["tools"]] == ["get_weather"] and sent["tool_choice"] == {"type": "none"}
    assert sent["messages"][1]["content"][0]["type"] == "tool_use"
