"""POST /v1/chat/completions end to end: the official `openai` SDK against a real daemon
through its front door (the mock provider, scripted, or a fake Anthropic upstream).

The mock is scripted through `provider_options` in the SDK's `extra_body`, as any
trunkline field is sent through the door."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pydantic
import pytest
import trio
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from door import Door, start_door
from fakes.providers import AnthropicHarness, Turn
from helpers import steps

pytestmark = pytest.mark.e2e


def sdk(door: Door) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=door.base_url, api_key=door.key, max_retries=0)


def mock(*items: dict[str, Any], **options: Any) -> dict[str, Any]:
    """The SDK's extra_body scripting the mock."""
    return {"provider_options": steps(*items, **options)}


USAGE = {"usage": {"input_tokens": 120, "output_tokens": 40, "reasoning_tokens": 25, "cache_read_tokens": 100}}


async def test_a_plain_completion_with_every_instruction_role_and_usage_details(door: Door):
    with trio.fail_after(30):
        completion = await sdk(door).chat.completions.create(
            model="mock:echo",
            messages=[
                {"role": "system", "content": "Be brief.", "name": "house-rules"},
                {"role": "developer", "content": [{"type": "text", "text": "Answer in English."}]},
                {"role": "user", "content": "Say hello."},
            ],
            temperature=0.2,
            max_completion_tokens=200,
            seed=7,
            stop=["\n\n"],
            extra_body=mock({"reasoning": "The user wants a greeting."}, {"text": "Hello "}, {"text": "there."}, USAGE),
        )
    (choice,) = completion.choices
    assert choice.message.content == "Hello there." and choice.message.role == "assistant"
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert choice.message.model_extra == {"reasoning_content": "The user wants a greeting."}
    assert completion.object == "chat.completion" and completion.model == "mock:echo"
    assert completion.id.startswith("chatcmpl-")
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (120, 40, 160)
    assert usage.prompt_tokens_details.cached_tokens == 100
    assert usage.completion_tokens_details.reasoning_tokens == 25


async def test_the_sdks_stream_helper_accepts_the_stream_and_its_usage_chunk(door: Door):
    received: list[tuple[str, str]] = []
    with trio.fail_after(30):
        async with sdk(door).chat.completions.stream(
            model="mock:echo",
            messages=[{"role": "user", "content": "Count to three."}],
            stream_options={"include_usage": True},
            extra_body=mock({"text": "One, "}, {"text": "two, "}, {"text": "three."}, USAGE),
        ) as stream:
            async for event in stream:
                if event.type == "chunk" and not event.chunk.choices:
                    usage_chunk = event.chunk
                elif event.type == "content.delta":
                    received.append((event.type, event.delta))
                elif event.type != "chunk":
                    received.append((event.type, event.content))
            final = await stream.get_final_completion()
    # The role chunk's empty content is a delta too, as it is from OpenAI.
    deltas = [("content.delta", d) for d in ("", "One, ", "two, ", "three.")]
    assert received == [*deltas, ("content.done", "One, two, three.")]
    assert final.choices[0].message.content == "One, two, three."
    assert final.choices[0].finish_reason == "stop"
    assert usage_chunk.usage.total_tokens == 160 and usage_chunk.usage.prompt_tokens_details.cached_tokens == 100
    assert final.usage == usage_chunk.usage


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


async def test_a_tool_calling_exchange_streams_parallel_calls_then_answers_from_their_results(door: Door):
    turns = {
        "turns": [
            [
                {"text": "Checking both."},
                {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}, "chunks": 4}},
                {"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}, "chunks": 3}},
            ],
            [{"text": "Paris is sunny, Oslo is snowing."}],
        ]
    }
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
    client = sdk(door)
    with trio.fail_after(30):
        async with client.chat.completions.stream(
            model="mock:echo",
            messages=messages,
            tools=[WEATHER],
            tool_choice="auto",
            parallel_tool_calls=True,
            extra_body={"provider_options": {"mock": turns}},
        ) as stream:
            done = [e async for e in stream if e.type == "tool_calls.function.arguments.done"]
            first = await stream.get_final_completion()
        message = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls" and message.content == "Checking both."
        assert [(e.index, e.name, e.parsed_arguments) for e in done] == [
            (0, "get_weather", {"city": "Paris"}),
            (1, "get_weather", {"city": "Oslo"}),
        ]
        calls = message.tool_calls
        assert len({c.id for c in calls}) == 2 and all(c.type == "function" for c in calls)
        # The answer goes back as the SDK accumulated it (its calls keep their stream `index`).
        messages.append(
            message.model_dump(
                exclude_none=True,
                exclude={"tool_calls": {"__all__": {"function": {"parsed_arguments"}}}, "parsed": True},
            )
        )
        weather = {"Paris": "sunny", "Oslo": "snowing"}
        for call in calls:
            city = json.loads(call.function.arguments)["city"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": weather[city]})
        second = await client.chat.completions.create(
            model="mock:echo", messages=messages, tools=[WEATHER], extra_body={"provider_options": {"mock": turns}}
        )
    assert second.choices[0].message.content == "Paris is sunny, Oslo is snowing."
    assert second.choices[0].finish_reason == "stop"


class City(pydantic.BaseModel):
    name: str
    population: int


async def test_json_schema_output_is_parsed_by_the_sdk(door: Door):
    with trio.fail_after(30):
        completion = await sdk(door).chat.completions.parse(
            model="mock:echo",
            messages=[{"role": "user", "content": "The biggest city of France, as JSON."}],
            response_format=City,
            extra_body=mock({"text": '{"name": "Paris", '}, {"text": '"population": 2102650}'}),
        )
    assert completion.choices[0].message.parsed == City(name="Paris", population=2102650)


async def test_errors_reach_the_sdk_as_its_own_exceptions(door: Door):
    client = sdk(door)
    user = [{"role": "user", "content": "hi"}]

    def failing(error_class: str, status: int, **more: Any) -> dict[str, Any]:
        step = {"error": {"error_class": error_class, "status": status, "message": f"scripted {status}", **more}}
        return {**mock(step), "max_retries": 0}

    with trio.fail_after(60):
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="mock:echo", messages=user, n=2)
        with pytest.raises(openai.BadRequestError) as out_of_range:
            await client.chat.completions.create(model="mock:echo", messages=user, temperature=9)
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(model="mock:no-such-model", messages=user)
        with pytest.raises(openai.RateLimitError) as limited:
            await client.chat.completions.create(
                model="mock:echo", messages=user, extra_body=failing("rate_limit", 429, retry_after=7)
            )
        with pytest.raises(openai.InternalServerError) as broken:
            await client.chat.completions.create(
                model="mock:echo", messages=user, extra_body=failing("server_error", 500)
            )
        with pytest.raises(openai.InternalServerError) as overloaded:
            await client.chat.completions.create(
                model="mock:echo", messages=user, extra_body=failing("rate_limit", 529)
            )
    assert refused.value.status_code == 400 and refused.value.param == "n" and "`n` must be 1" in refused.value.message
    assert refused.value.type == "invalid_request_error"
    assert out_of_range.value.status_code == 400 and "temperature" in out_of_range.value.message
    assert missing.value.status_code == 404 and missing.value.code == "model_not_found"
    assert limited.value.status_code == 429 and limited.value.response.headers["retry-after"] == "7"
    assert limited.value.type == "rate_limit_error" and "scripted 429" in limited.value.message
    assert broken.value.status_code == 500 and "scripted 500" in broken.value.message
    assert overloaded.value.status_code == 503


async def test_an_error_after_the_stream_began_is_streamed_as_openai_streams_it(door: Door):
    seen: list[str] = []

    async def read() -> None:
        async with sdk(door).chat.completions.stream(
            model="mock:echo",
            messages=[{"role": "user", "content": "hi"}],
            extra_body={
                **mock(
                    {"text": "Half an answ"}, {"error": {"error_class": "server_error", "message": "upstream fell"}}
                ),
                "max_retries": 0,
            },
        ) as stream:
            async for event in stream:
                if event.type == "content.delta":
                    seen.append(event.delta)

    with trio.fail_after(30), pytest.raises(openai.APIError) as failed:
        await read()
    assert "".join(seen) == "Half an answ"
    assert "upstream fell" in failed.value.message and failed.value.body["type"] == "server_error"


async def test_an_openai_client_calls_an_anthropic_model_through_the_door(start_daemon):
    """Any model behind any door: the OpenAI SDK on a Claude model, through the fake
    Anthropic upstream: an image as a data URL, a tool call, its result, and the schema."""
    door: Door | None = None

    async def daemon_with_door(config: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Any:
        nonlocal door
        door = await start_door(start_daemon, config, env)
        return door.daemon

    async with trio.open_nursery() as nursery:
        harness = await AnthropicHarness().start(nursery, daemon_with_door)
        assert door is not None
        harness.script(
            Turn(
                text="Let me look.", calls=[("get_weather", {"city": "Paris"})], input_tokens=300, cache_read_tokens=200
            ),
            Turn(text='{"name": "Paris", "population": 2102650}'),
        )
        client = sdk(door)
        pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
        messages: list[Any] = [
            {"role": "system", "content": "You are terse."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Where is this? Then the weather there."},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{pixel}"}},
                ],
            },
        ]
        with trio.fail_after(30):
            async with client.chat.completions.stream(
                model=harness.model, messages=messages, tools=[WEATHER], stream_options={"include_usage": True}
            ) as stream:
                first = await stream.get_final_completion()
            (call,) = first.choices[0].message.tool_calls
            messages.append(
                {
                    "role": "assistant",
                    "content": first.choices[0].message.content,
                    "tool_calls": [call.model_dump(exclude={"function": {"parsed_arguments"}})],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
            second = await client.chat.completions.parse(
                model=harness.model, messages=messages, tools=[WEATHER], response_format=City
            )
        nursery.cancel_scope.cancel()
    assert first.choices[0].finish_reason == "tool_calls" and first.choices[0].message.content == "Let me look."
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert first.usage.prompt_tokens == 300 and first.usage.prompt_tokens_details.cached_tokens == 200
    assert second.choices[0].message.parsed == City(name="Paris", population=2102650)
    sent_first, sent_second = harness.sent()
    assert sent_first["system"][0]["text"] == "You are terse."
    image = sent_first["messages"][0]["content"][1]
    assert image["source"] == {"type": "base64", "media_type": "image/png", "data": pixel}
    assert sent_first["tools"][0]["name"] == "get_weather"
    assert harness.tool_calls(sent_second) == [harness.call_id(0, 0)]
    assert harness.tool_results(sent_second) == [(harness.call_id(0, 0), "sunny")]
    assert harness.output_schema(sent_second)["properties"].keys() == {"name", "population"}


async def test_every_content_part_and_role_in_a_history_is_accepted_by_the_daemon(door: Door):
    pdf = "JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoKPDwvTGVuZ3RoIDMgMCBSPj4Kc3RyZWFtCg=="
    wav = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA="
    messages: list[Any] = [
        {"role": "developer", "content": "Describe what you are given."},
        {
            "role": "user",
            "name": "ann",
            "content": [
                {"type": "text", "text": "Look at this: "},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}},
                {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}},
                {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{pdf}", "filename": "a.pdf"}},
            ],
        },
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot open that."}]},
        {"role": "user", "content": [{"type": "text", "text": "Then just "}, {"type": "text", "text": "say ok."}]},
    ]
    with trio.fail_after(30):
        completion = await sdk(door).chat.completions.create(model="mock:echo", messages=messages)
    assert completion.choices[0].message.content == "Then just say ok."


RECORDINGS = Path(__file__).resolve().parents[2].parent / "shared" / "recordings" / "openai-chat"


def recorded_bodies() -> list[tuple[str, dict[str, Any]]]:
    """The Chat Completions bodies real SDKs and agents sent (the cases that kept one)."""
    found = []
    for path in sorted(RECORDINGS.glob("*/*/request.json")):
        body = json.loads(path.read_text()).get("body")
        if isinstance(body, dict):
            found.append((path.parent.name, body))
    return found


@pytest.mark.skipif(not RECORDINGS.exists(), reason="../shared/recordings is not present")
async def test_recorded_requests_are_accepted_and_answered_in_the_sdks_types(door: Door):
    """Each recorded body as it was sent, the model aside (the mock answers here), and
    each answer read by the SDK's own types; a stream, through the SDK's accumulator."""
    cases = recorded_bodies()
    assert cases, f"no request bodies under {RECORDINGS}"
    async with httpx.AsyncClient(base_url=door.base_url, headers={"authorization": f"Bearer {door.key}"}) as http:
        for name, body in cases:
            sent = {**body, "model": "mock:echo"}
            with trio.fail_after(30):
                reply = await http.post("/chat/completions", json=sent)
            assert reply.status_code == 200, (name, reply.text)
            if not body.get("stream"):
                completion = ChatCompletion.model_validate(reply.json())
                assert completion.choices[0].message.content, name
                continue
            state: ChatCompletionStreamState[None] = ChatCompletionStreamState(input_tools=body.get("tools", []))
            lines = [line.removeprefix("data: ") for line in reply.text.split("\n\n") if line]
            assert lines[-1] == "[DONE]", name
            chunks = [ChatCompletionChunk.model_validate_json(line) for line in lines[:-1]]
            for chunk in chunks:
                state.handle_chunk(chunk)
            final = state.get_final_completion()
            assert final.choices[0].message.content and final.choices[0].finish_reason == "stop", name
            if body.get("stream_options", {}).get("include_usage"):
                assert chunks[-1].choices == [] and chunks[-1].usage is not None, name
