"""POST /v1/messages and /count_tokens through the real daemon, with the official
`anthropic` SDK as the client: the mock, an Anthropic provider and an OpenAI one behind
the same door (the providers on fake upstreams on 127.0.0.1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
import trio
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from frontdoor.anthropic_door import ANTHROPIC_KEY, OPENAI_KEY, RECORDINGS, SharedDoor, events_of
from pydantic import TypeAdapter

from fakes import openai_responses as oa
from fakes.upstream import Reply
from trunkline import Client, Message, Tool

pytestmark = pytest.mark.e2e

CLAUDE = "anthropic:claude-sonnet-4-5"
WEATHER = {
    "name": "weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
EVENTS: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


@pytest.fixture(scope="module")
def shared() -> Iterator[SharedDoor]:
    with SharedDoor() as door:
        yield door


@pytest.fixture
def front(shared: SharedDoor) -> SharedDoor:
    shared.forget()
    return shared


def sdk(front: SharedDoor, **kwargs: Any) -> anthropic.AsyncAnthropic:
    assert front.door is not None
    return anthropic.AsyncAnthropic(base_url=front.door.url, api_key=front.door.key, max_retries=0, **kwargs)


def mock(*steps: dict[str, Any]) -> dict[str, Any]:
    """`extra_body` scripting the mock (trunkline's own `provider_options` field)."""
    return {"provider_options": {"mock": {"steps": list(steps)}}}


def sse(*events: dict[str, Any]) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def message_start(id: str, usage: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's first event of a stream: the message, empty, with its input usage."""
    message = {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    return {"type": "message_start", "message": message}


def text_begun(text: str) -> list[dict[str, Any]]:
    """A stream's first events, up to its first words."""
    return [
        message_start("msg_x", {"input_tokens": 5}),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
    ]


def anthropic_turn(blocks: list[dict[str, Any]], stop: str, *, usage: dict[str, Any] | None = None) -> Reply:
    """One Anthropic turn, streamed as Anthropic streams it (the worker always asks for a stream)."""
    usage = usage or {"input_tokens": 40, "output_tokens": 12}
    events: list[dict[str, Any]] = [message_start("msg_up", usage)]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            for i in range(0, len(block["text"]), 4):
                delta = {"type": "text_delta", "text": block["text"][i : i + 4]}
                events.append({"type": "content_block_delta", "index": index, "delta": delta})
        elif block["type"] == "tool_use":
            start = {**block, "input": {}}
            events.append({"type": "content_block_start", "index": index, "content_block": start})
            raw = json.dumps(block["input"])
            for i in range(0, len(raw), 5):
                delta = {"type": "input_json_delta", "partial_json": raw[i : i + 5]}
                events.append({"type": "content_block_delta", "index": index, "delta": delta})
        else:
            events.append({"type": "content_block_start", "index": index, "content_block": block})
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {**usage}})
    events.append({"type": "message_stop"})
    return Reply.sse(sse(*events), chunk_size=61)


def sent(upstream: Any, path: str = "/v1/messages") -> list[dict[str, Any]]:
    return [r.json() for r in upstream.sent(path)]


# -- the plain forms -------------------------------------------------------------------


async def test_a_message_and_its_usage(front: SharedDoor):
    with trio.fail_after(30):
        message = await sdk(front).messages.create(
            model="mock:echo",
            max_tokens=64,
            system="Be brief.",
            messages=[{"role": "user", "content": "hello through the door"}],
        )
    assert message.type == "message" and message.role == "assistant" and message.model == "mock:echo"
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [("text", "hello through the door")]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    assert message.id.startswith("msg_")


async def test_a_stream_through_the_sdks_helper(front: SharedDoor):
    script = mock(
        {"text": "Hel"}, {"text": "lo, "}, {"text": "stream."}, {"usage": {"input_tokens": 9, "output_tokens": 4}}
    )
    with trio.fail_after(30):
        async with sdk(front).messages.stream(
            model="mock:echo",
            max_tokens=64,
            messages=[{"role": "user", "content": "x"}],
            extra_body=script,
        ) as stream:
            kinds = [event.type async for event in stream]
            message = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("text") == 3 and "message_delta" in kinds
    assert message.content[0].type == "text" and message.content[0].text == "Hello, stream."
    assert (message.usage.input_tokens, message.usage.output_tokens) == (9, 4)
    assert message.stop_reason == "end_turn"


async def test_count_tokens_is_the_daemons_count(front: SharedDoor):
    assert front.door is not None
    with trio.fail_after(30):
        counted = await sdk(front).messages.count_tokens(
            model="mock:echo",
            system="You count.",
            messages=[{"role": "user", "content": "How many tokens is this sentence, roughly?"}],
            tools=[WEATHER],
        )
        async with Client(front.door.daemon.runtime_dir) as client:
            direct = await client.count_tokens(
                "mock:echo",
                [Message.system("You count."), Message.user("How many tokens is this sentence, roughly?")],
                tools=[Tool(name="weather", description=WEATHER["description"], parameters=WEATHER["input_schema"])],
            )
    assert counted.input_tokens == direct.input_tokens > 10


# -- an Anthropic provider behind the door -----------------------------------------------


async def test_a_tool_loop_over_two_turns_keeps_the_providers_ids(front: SharedDoor):
    front.anthropic.route(
        "POST",
        "/v1/messages",
        anthropic_turn(
            [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01Paris", "name": "weather", "input": {"city": "Paris"}},
            ],
            "tool_use",
        ),
        anthropic_turn([{"type": "text", "text": "It is 18C in Paris."}], "end_turn"),
    )
    client = sdk(front)
    history: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    with trio.fail_after(30):
        first = await client.messages.create(model=CLAUDE, max_tokens=512, tools=[WEATHER], messages=history)
        assert first.stop_reason == "tool_use"
        (call,) = [b for b in first.content if b.type == "tool_use"]
        assert call.name == "weather" and call.input == {"city": "Paris"} and call.id.startswith("tu_")
        history += [
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C, clear"}]},
        ]
        second = await client.messages.create(model=CLAUDE, max_tokens=512, tools=[WEATHER], messages=history)
    assert second.content[0].type == "text" and second.content[0].text == "It is 18C in Paris."
    bodies = sent(front.anthropic)
    assert len(bodies) == 2
    turn = bodies[1]["messages"]
    assert [m["role"] for m in turn] == ["user", "assistant", "user"]
    tool_use = [b for b in turn[1]["content"] if b["type"] == "tool_use"]
    assert [(b["id"], b["input"]) for b in tool_use] == [("toolu_01Paris", {"city": "Paris"})]
    (result,) = turn[2]["content"]
    assert (result["type"], result["tool_use_id"], result["content"]) == ("tool_result", "toolu_01Paris", "18C, clear")
    assert bodies[1]["tools"][0]["name"] == "weather"


def recorded_stream(case: str) -> tuple[bytes, list[dict[str, Any]]]:
    """A recorded Anthropic stream, and its content blocks as the SDK builds them."""
    body = (RECORDINGS / case / "response.body").read_bytes()
    snapshot = None
    bufs: dict[int, bytes] = {}
    for _, data in events_of(body):
        if data["type"] not in ("ping", "error"):
            snapshot = accumulate_event(event=EVENTS.validate_python(data), current_snapshot=snapshot, json_bufs=bufs)
    assert snapshot is not None
    return body, snapshot.to_dict(mode="json")["content"]


@pytest.mark.skipif(not RECORDINGS.exists(), reason="../shared/recordings is not present")
async def test_thinking_and_redacted_thinking_go_back_byte_for_byte(front: SharedDoor):
    """Real recorded streams: redacted thinking, then signed thinking, each sent back
    in the next turn exactly as the first turn's upstream sent it."""
    redacted_sse, redacted = recorded_stream(
        "pydantic+pydantic-ai/tests__models__cassettes__test_anthropic__test_anthropic_model_thinking_part_redacted_stream"
    )
    thinking_sse, thinking = recorded_stream(
        "pydantic+pydantic-ai/tests__models__cassettes__test_anthropic__test_anthropic_model_thinking_part_stream"
    )
    front.anthropic.route(
        "POST",
        "/v1/messages",
        Reply.sse(redacted_sse, chunk_size=97),
        Reply.sse(thinking_sse, chunk_size=97),
        anthropic_turn([{"type": "text", "text": "Done."}], "end_turn"),
    )
    client = sdk(front)
    settings: dict[str, Any] = {
        "model": CLAUDE,
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    history: list[Any] = [{"role": "user", "content": "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING"}]
    with trio.fail_after(30):
        async with client.messages.stream(messages=history, **settings) as stream:
            first = await stream.get_final_message()
        history += [{"role": "assistant", "content": first.content}, {"role": "user", "content": "And the weather?"}]
        second = await client.messages.create(messages=history, **settings)
        history += [{"role": "assistant", "content": second.content}, {"role": "user", "content": "Thanks."}]
        third = await client.messages.create(messages=history, **settings)
    assert third.content[0].type == "text"

    def signed(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [b for b in blocks if b["type"] in ("thinking", "redacted_thinking")]

    assert [b["type"] for b in signed(redacted)] == ["redacted_thinking", "redacted_thinking"]
    assert [b["type"] for b in signed(thinking)] == ["thinking"] and signed(thinking)[0]["signature"]
    # The client got the blocks as the upstream made them ...
    assert signed([b.to_dict() for b in first.content]) == signed(redacted)
    assert signed([b.to_dict() for b in second.content]) == signed(thinking)
    # ... and each later turn's upstream body carries them exactly.
    bodies = sent(front.anthropic)
    assert len(bodies) == 3
    assert signed(bodies[1]["messages"][1]["content"]) == signed(redacted)
    assert signed(bodies[2]["messages"][1]["content"]) == signed(redacted)
    assert signed(bodies[2]["messages"][3]["content"]) == signed(thinking)
    assert all(b["thinking"] == {"type": "enabled", "budget_tokens": 1024} for b in bodies)


async def test_the_clients_cache_breakpoints_and_betas_reach_anthropic(front: SharedDoor):
    usage = {
        "input_tokens": 100,
        "cache_read_input_tokens": 600,
        "cache_creation_input_tokens": 300,
        "output_tokens": 12,
    }
    front.anthropic.route(
        "POST", "/v1/messages", anthropic_turn([{"type": "text", "text": "Cached."}], "end_turn", usage=usage)
    )
    client = sdk(front, default_headers={"anthropic-beta": "context-1m-2025-08-07, fast-mode-2026-02-01"})
    with trio.fail_after(30):
        message = await client.messages.create(
            model=CLAUDE,
            max_tokens=100,
            system=[{"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            tools=[{**WEATHER, "cache_control": {"type": "ephemeral"}}],
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "A long document.", "cache_control": {"type": "ephemeral"}},
                        {"type": "text", "text": "A question about it."},
                    ],
                }
            ],
            metadata={"user_id": "user-7"},
            stop_sequences=["END"],
        )
    assert message.content[0].type == "text" and message.content[0].text == "Cached."
    # Anthropic's own figures come back as they were (the daemon counts cached tokens in its input).
    assert message.usage.input_tokens == 100 and message.usage.output_tokens == 12
    assert (message.usage.cache_read_input_tokens, message.usage.cache_creation_input_tokens) == (600, 300)
    (request,) = front.anthropic.sent("/v1/messages")
    body = request.json()
    assert body["system"] == [
        {"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    ]
    assert body["tools"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "A long document.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "A question about it."},
    ]
    assert json.dumps(body).count("cache_control") == 3  # the client's, and no others
    assert body["metadata"] == {"user_id": "user-7"} and body["stop_sequences"] == ["END"]
    assert request.headers["anthropic-beta"] == "context-1m-2025-08-07,fast-mode-2026-02-01"
    assert request.headers["x-api-key"] == ANTHROPIC_KEY


async def test_a_prefill_through_the_door_is_continued_by_a_model_that_takes_one(front: SharedDoor):
    # Claude 4.5 takes a prefill: the SDK's trailing assistant turn reaches Anthropic as it was
    # written, and the message the SDK gets back is the continuation only, as Anthropic's own is.
    front.anthropic.route("POST", "/v1/messages", anthropic_turn([{"type": "text", "text": " 42."}], "end_turn"))
    with trio.fail_after(30):
        message = await sdk(front).messages.create(
            model=CLAUDE,
            max_tokens=100,
            messages=[
                {"role": "user", "content": "What is six times seven?"},
                {"role": "assistant", "content": "The answer is"},
            ],
        )
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [("text", " 42.")]
    assert message.stop_reason == "end_turn"
    (body,) = sent(front.anthropic)
    assert body["messages"][-1]["role"] == "assistant"
    assert json.dumps(body["messages"][-1]["content"]).count("The answer is") == 1


async def test_server_tools_reach_anthropic_and_their_blocks_come_back_whole(front: SharedDoor):
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "trio"}}
    found = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {"type": "web_search_result", "url": "https://trio.rtfd.io", "title": "Trio", "encrypted_content": "E1"}
        ],
    }
    usage = {"input_tokens": 20, "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 0, "output_tokens": 40}
    front.anthropic.route(
        "POST",
        "/v1/messages",
        anthropic_turn([search, found, {"type": "text", "text": "Trio is a library."}], "end_turn", usage=usage),
        anthropic_turn([{"type": "text", "text": "Yes."}], "end_turn"),
    )
    tools = [WEATHER, {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]
    client = sdk(front)
    history: list[Any] = [{"role": "user", "content": "What is trio?"}]
    with trio.fail_after(30):
        async with client.messages.stream(model=CLAUDE, max_tokens=512, tools=tools, messages=history) as stream:
            first = await stream.get_final_message()
        history += [{"role": "assistant", "content": first.content}, {"role": "user", "content": "Sure?"}]
        await client.messages.create(model=CLAUDE, max_tokens=512, tools=tools, messages=history)
    assert [b.type for b in first.content] == ["server_tool_use", "web_search_tool_result", "text"]
    assert (first.usage.input_tokens, first.usage.cache_read_input_tokens, first.usage.output_tokens) == (20, 2000, 40)
    bodies = sent(front.anthropic)
    # As sent (the daemon's automatic cache breakpoint aside, which marks the last tool).
    assert [{k: v for k, v in t.items() if k != "cache_control"} for t in bodies[0]["tools"]] == tools
    assert bodies[0]["tool_choice"] == {"type": "auto"}
    assert bodies[1]["messages"][1]["content"][:2] == [search, found]


# -- any model behind this door -----------------------------------------------------------


async def test_an_openai_model_behind_the_anthropic_door(front: SharedDoor):
    def turn(items: list[dict[str, Any]], n: int) -> Reply:
        usage = {"input_tokens": 50, "output_tokens": 9, "total_tokens": 59}
        return Reply.sse(oa.sse(oa.events(items, usage=usage, response_id=f"resp_{n}")), chunk_size=89)

    front.openai.route(
        "POST",
        "/v1/responses",
        turn([oa.function_call("fc_1", "call_Paris", "weather", {"city": "Paris"})], 0),
        turn([oa.message("msg_1", "18C in Paris.")], 1),
    )
    client = sdk(front)
    history: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    with trio.fail_after(30):
        async with client.messages.stream(
            model="openai:gpt-5", max_tokens=400, system="Be brief.", tools=[WEATHER], messages=history
        ) as stream:
            first = await stream.get_final_message()
        (call,) = [b for b in first.content if b.type == "tool_use"]
        history += [
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C"}]},
        ]
        second = await client.messages.create(model="openai:gpt-5", max_tokens=400, tools=[WEATHER], messages=history)
    assert first.stop_reason == "tool_use" and call.input == {"city": "Paris"}
    assert second.content[0].type == "text" and second.content[0].text == "18C in Paris."
    assert second.stop_reason == "end_turn"
    requests = front.openai.sent("/v1/responses")
    assert requests[0].headers["authorization"] == f"Bearer {OPENAI_KEY}"
    first_body, second_body = (r.json() for r in requests)
    assert first_body["instructions"] == "Be brief." and first_body["max_output_tokens"] == 400
    assert first_body["tools"][0]["type"] == "function" and first_body["tools"][0]["name"] == "weather"
    calls = [i for i in second_body["input"] if i["type"] == "function_call"]
    outputs = [i for i in second_body["input"] if i["type"] == "function_call_output"]
    assert [c["call_id"] for c in calls] == ["call_Paris"] and [(o["call_id"], o["output"]) for o in outputs] == [
        ("call_Paris", "18C")
    ]


async def test_what_another_provider_cannot_do_is_refused_with_a_sentence(front: SharedDoor):
    client = sdk(front)
    with trio.fail_after(30), pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(
            model="openai:gpt-5",
            max_tokens=100,
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
            messages=[{"role": "user", "content": "x"}],
        )
    body: Any = caught.value.body
    assert caught.value.status_code == 400 and body["error"]["type"] == "invalid_request_error"
    assert "Anthropic server tool" in caught.value.message and "openai:gpt-5" in caught.value.message
    assert not front.openai.sent("/v1/responses")


# -- errors, as the SDK raises them ---------------------------------------------------------


@pytest.mark.parametrize(
    ("error_class", "status", "raised", "kind"),
    [
        ("invalid_request", 400, anthropic.BadRequestError, "invalid_request_error"),
        ("access_denied", 403, anthropic.PermissionDeniedError, "permission_error"),
        ("not_found", 404, anthropic.NotFoundError, "not_found_error"),
        ("rate_limit", 429, anthropic.RateLimitError, "rate_limit_error"),
        ("server_error", 500, anthropic.InternalServerError, "api_error"),
        ("unavailable", 503, anthropic.ServiceUnavailableError, "overloaded_error"),
        ("timeout", 504, anthropic.GatewayTimeoutError, "timeout_error"),
    ],
)
async def test_errors_in_anthropics_shape_and_status(
    front: SharedDoor, error_class: str, status: int, raised: type[Exception], kind: str
):
    error = {"error_class": error_class, "message": f"scripted {error_class}", "status": status, "retry_after": 7}
    with trio.fail_after(30), pytest.raises(raised) as caught:
        await sdk(front).messages.create(
            model="mock:echo",
            max_tokens=10,
            messages=[{"role": "user", "content": "x"}],
            extra_body=mock({"error": error}),
        )
    err = caught.value
    assert isinstance(err, anthropic.APIStatusError) and err.status_code == status
    body: Any = err.body
    assert body["type"] == "error" and body["error"]["type"] == kind
    assert body["error"]["message"].startswith(f"scripted {error_class}")
    assert err.response.headers["retry-after"] == "7"


async def test_an_overloaded_anthropic_is_529_and_a_bad_key_401(front: SharedDoor):
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    front.anthropic.route("POST", "/v1/messages", Reply.json(overloaded, status=529))
    with trio.fail_after(30):
        with pytest.raises(anthropic.OverloadedError) as caught:
            await sdk(front).messages.create(model=CLAUDE, max_tokens=10, messages=[{"role": "user", "content": "x"}])
        overloaded_body: Any = caught.value.body
        assert caught.value.status_code == 529 and overloaded_body["error"]["type"] == "overloaded_error"
        assert len(front.anthropic.sent("/v1/messages")) == 3  # overloaded is retried before any output, twice
        assert front.door is not None
        stranger = anthropic.AsyncAnthropic(base_url=front.door.url, api_key="not-a-key", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as denied:
            await stranger.messages.create(
                model="mock:echo", max_tokens=10, messages=[{"role": "user", "content": "x"}]
            )
    denied_body: Any = denied.value.body
    assert denied.value.status_code == 401 and denied_body["error"]["type"] == "authentication_error"
    assert ANTHROPIC_KEY not in front.door.daemon.output() and front.door.key not in front.door.daemon.output()


async def test_an_overloaded_error_once_streaming_is_an_error_event(front: SharedDoor):
    started = sse(
        *text_begun("Partial answer"),
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    front.anthropic.route("POST", "/v1/messages", Reply.sse(started))
    texts: list[str] = []

    async def read() -> None:
        async with sdk(front).messages.stream(
            model=CLAUDE, max_tokens=100, messages=[{"role": "user", "content": "x"}]
        ) as stream:
            async for text in stream.text_stream:
                texts.append(text)

    with trio.fail_after(30), pytest.raises(anthropic.APIStatusError) as caught:
        await read()
    assert "".join(texts) == "Partial answer"
    body: Any = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"


async def test_a_request_the_door_cannot_read_is_refused_before_any_call(front: SharedDoor):
    assert front.door is not None
    headers = {"x-api-key": front.door.key, "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(base_url=front.door.url, headers=headers) as http:
        with trio.fail_after(30):
            no_max = await http.post(
                "/v1/messages", json={"model": CLAUDE, "messages": [{"role": "user", "content": "x"}]}
            )
            version = await http.post(
                "/v1/messages",
                json={"model": CLAUDE, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
                headers={"anthropic-version": "1999-01-01"},
            )
            unknown = await http.post(
                "/v1/messages",
                json={"model": "nobody:x", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
            )
            prefill = await http.post(
                "/v1/messages",
                json={
                    "model": "anthropic:claude-opus-4-6",  # takes no prefill (Claude 4.5 does)
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "The answer is"}],
                },
            )
    assert no_max.status_code == 400 and "max_tokens" in no_max.json()["error"]["message"]
    assert version.status_code == 400 and "anthropic-version" in version.json()["error"]["message"]
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"
    assert prefill.status_code == 400 and prefill.json()["type"] == "error"
    assert not front.anthropic.sent("/v1/messages")


async def test_a_client_that_hangs_up_cancels_the_upstream_call(front: SharedDoor):
    endless = Reply(
        200,
        {"content-type": "text/event-stream"},
        [
            sse(*text_begun("first words")).encode(),
            b"never sent",
        ],
        stall_after=1,  # then silent, the connection open: only a cancel ends it
    )
    front.anthropic.route("POST", "/v1/messages", endless)
    before = front.anthropic.closed_early
    with trio.fail_after(30):
        async with sdk(front).messages.stream(
            model=CLAUDE, max_tokens=100, messages=[{"role": "user", "content": "x"}]
        ) as stream:
            async for text in stream.text_stream:
                assert text == "first words"
                break  # and hang up
        while front.anthropic.closed_early == before:  # the worker let go of the upstream
            await trio.sleep(0.02)
