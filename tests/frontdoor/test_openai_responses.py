"""POST /v1/responses through a real daemon, with the official `openai` SDK as the client.

The SDK validates every body it reads (`_strict_response_validation`) and its stream
helper (`responses.stream`) checks the event sequence (a response created first, every
item added before its content and done before the response completes, one identity per
item). Behind the door: the mock, and OpenAI, Anthropic and Gemini as fake upstreams
(`shared_door.SharedDoor`), whose wire bodies show what the providers were sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest
import trio

from fakes import openai_responses as oa
from fakes.providers import Turn
from helpers import steps
from shared_door import SharedDoor
from trunkline import Client

pytestmark = pytest.mark.e2e

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather now in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def shared() -> Iterator[SharedDoor]:
    with SharedDoor() as door:
        yield door


@pytest.fixture
def door(shared: SharedDoor) -> SharedDoor:
    shared.forget()
    return shared


def sdk(door: SharedDoor) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=door.base_url, api_key=door.key, max_retries=0, _strict_response_validation=True)


async def test_a_conversation_whole_and_streamed(door: SharedDoor):
    client = sdk(door)
    with trio.fail_after(30):
        whole = await client.responses.create(
            model="mock:echo",
            instructions="Answer briefly.",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "hello through the door"}]}],
            metadata={"ticket": "T-1"},
            max_output_tokens=100,
        )
        script = steps(
            {"reasoning": "The user greets me."},
            {"signature": "sig-mock"},
            {"text": "Hello "},
            {"text": "to you."},
            {"usage": {"input_tokens": 12, "output_tokens": 7, "reasoning_tokens": 3, "cache_read_tokens": 4}},
        )
        async with client.responses.stream(
            model="mock:echo", input="hi", extra_body={"provider_options": script}
        ) as stream:
            kinds = [(event.type, event.sequence_number) async for event in stream]
            final = await stream.get_final_response()
    assert whole.output_text == "hello through the door" and whole.status == "completed"
    assert whole.metadata == {"ticket": "T-1"} and whole.max_output_tokens == 100
    assert whole.instructions == "Answer briefly." and whole.model == "mock:echo"
    assert [n for _, n in kinds] == list(range(len(kinds)))
    assert [k for k, _ in kinds] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # the reasoning item
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",  # the message
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    reasoning, message = final.output
    assert reasoning.type == "reasoning" and [s.text for s in reasoning.summary] == ["The user greets me."]
    assert reasoning.encrypted_content  # the signature, sealed for the next turn
    assert message.type == "message" and final.output_text == "Hello to you."
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (12, 7, 19)
    assert final.usage.input_tokens_details.cached_tokens == 4
    assert final.usage.output_tokens_details.reasoning_tokens == 3


async def test_function_calling_over_two_turns_reaches_the_provider_with_its_own_ids(door: SharedDoor):
    """OpenAI behind the door: the call the client answers carries the canonical id the door
    gave out, and OpenAI gets back its own call id, with the result, on the second turn."""
    door.openai.script(Turn(calls=[("get_weather", {"city": "Paris"})]), Turn(text="It is sunny in Paris."))
    client = sdk(door)
    question = {"role": "user", "content": "What is the weather in Paris?"}
    with trio.fail_after(30):
        async with client.responses.stream(model="openai:gpt-5", input=[question], tools=[WEATHER_TOOL]) as stream:
            argument_deltas = [e.delta async for e in stream if e.type == "response.function_call_arguments.delta"]
            first = await stream.get_final_response()
        (call,) = [item for item in first.output if item.type == "function_call"]
        assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
        assert "".join(argument_deltas) == call.arguments
        second = await client.responses.create(
            model="openai:gpt-5",
            input=[
                question,
                *[item.model_dump(exclude_none=True) for item in first.output],
                {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 24 C"},
            ],
            tools=[WEATHER_TOOL],
        )
    assert call.call_id.startswith("tu_")  # the canonical id, not OpenAI's
    assert second.output_text == "It is sunny in Paris."
    sent = door.openai.sent()[-1]
    assert door.openai.tool_calls(sent) == ["call_0_0"]
    assert door.openai.tool_results(sent) == [("call_0_0", "sunny, 24 C")]
    assert sent["tools"][0]["name"] == "get_weather"


class Weather(pydantic.BaseModel):
    city: str
    temp_c: int


async def test_text_format_json_schema_goes_to_the_provider_and_parses(door: SharedDoor):
    door.openai.script(Turn(text='{"city":"Paris","temp_c":24}'))
    client = sdk(door)
    with trio.fail_after(30):
        parsed = await client.responses.parse(model="openai:gpt-5", input="Weather in Paris?", text_format=Weather)
    assert parsed.output_parsed == Weather(city="Paris", temp_c=24)
    fmt = door.openai.sent()[-1]["text"]["format"]
    assert fmt["type"] == "json_schema" and fmt["name"] == "Weather" and fmt["strict"] is True
    assert fmt["schema"]["properties"] == {
        "city": {"title": "City", "type": "string"},
        "temp_c": {"title": "Temp C", "type": "integer"},
    }


async def test_openai_reasoning_comes_back_on_the_next_turn_as_it_was(door: SharedDoor):
    door.openai.script(Turn(reasoning="Two and two make four.", text="4"), Turn(text="8"))
    client = sdk(door)
    first_question = {"role": "user", "content": "2+2?"}
    with trio.fail_after(30):
        async with client.responses.stream(
            model="openai:gpt-5", input=[first_question], reasoning={"effort": "low", "summary": "auto"}
        ) as stream:
            first = await stream.get_final_response()
        second = await client.responses.create(
            model="openai:gpt-5",
            input=[first_question, *first.output, {"role": "user", "content": "and doubled?"}],
            reasoning={"effort": "low"},
        )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and [s.text for s in reasoning.summary] == ["Two and two make four."]
    assert second.output_text == "8"
    first_body, second_body = door.openai.sent()
    assert first_body["reasoning"] == {"effort": "low", "summary": "auto"}
    carried = [item for item in second_body["input"] if item["type"] == "reasoning"]
    assert carried == [oa.reasoning("rs_0", ["Two and two make four."], encrypted="gAAAAB-enc-0")]


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
async def test_another_providers_model_behind_the_openai_door(door: SharedDoor, provider: str):
    """An OpenAI client calls Anthropic or Gemini; its reasoning and calls come back on the next
    turn as the provider wrote them (Anthropic's signed thinking, Gemini's signed call)."""
    harness = door.anthropic if provider == "anthropic" else door.gemini
    harness.script(
        Turn(reasoning="Weather needs a tool.", calls=[("get_weather", {"city": "Oslo"})]),
        Turn(text="Cold in Oslo."),
    )
    client = sdk(door)
    question = {"role": "user", "content": "Weather in Oslo?"}
    with trio.fail_after(30):
        async with client.responses.stream(
            model=harness.model, input=[question], tools=[WEATHER_TOOL], reasoning={"effort": "medium"}
        ) as stream:
            first = await stream.get_final_response()
        (call,) = [item for item in first.output if item.type == "function_call"]
        second = await client.responses.create(
            model=harness.model,
            input=[
                question,
                *first.output,
                {"type": "function_call_output", "call_id": call.call_id, "output": "-3 C"},
            ],
            tools=[WEATHER_TOOL],
        )
    assert first.output[0].type == "reasoning"
    assert [s.text for s in first.output[0].summary] == ["Weather needs a tool."]
    assert second.output_text == "Cold in Oslo."
    sent = harness.sent()[-1]
    assert harness.tool_calls(sent) == [harness.call_id(0, 0)]
    assert harness.tool_results(sent) == [(harness.call_id(0, 0), "-3 C")]
    if provider == "anthropic":
        thinking = [b for b in sent["messages"][1]["content"] if b["type"] == "thinking"]
        assert thinking == [{"type": "thinking", "thinking": "Weather needs a tool.", "signature": "sig-0"}]
    else:
        (signed,) = [p for p in sent["contents"][1]["parts"] if "functionCall" in p]
        assert signed["thoughtSignature"] == "U0lHLWNhbGwt0"  # its own, not the skip marker


async def test_refusals_and_failures_as_the_sdk_raises_them(door: SharedDoor):
    client = sdk(door)
    with trio.fail_after(30):
        with pytest.raises(openai.BadRequestError) as stored:
            await client.responses.create(model="mock:echo", input="x", previous_response_id="resp_123")
        with pytest.raises(openai.BadRequestError) as unknown:
            await client.responses.create(model="mock:echo", input="x", extra_body={"modalities": ["text"]})
        with pytest.raises(openai.BadRequestError) as hosted:
            await client.responses.create(model="mock:echo", input="x", tools=[{"type": "web_search"}])
        with pytest.raises(openai.BadRequestError) as typed:
            await client.responses.create(model="mock:echo", input="x", extra_body={"max_output_tokens": "many"})
        with pytest.raises(openai.NotFoundError) as missing:
            await client.responses.create(model="nosuch:model", input="x")
        limited = steps({"error": {"error_class": "rate_limit", "status": 429, "retry_after": 7}})
        with pytest.raises(openai.RateLimitError) as rate:
            await client.responses.create(model="mock:echo", input="x", extra_body={"provider_options": limited})
        with pytest.raises(openai.RateLimitError) as rate_streamed:
            await stream_all(client, [], model="mock:echo", input="x", extra_body={"provider_options": limited})
    assert "send the whole conversation as `input`" in stored.value.message
    assert stored.value.body["param"] == "previous_response_id"
    assert "`modalities` is not taken" in unknown.value.message and unknown.value.body["param"] == "modalities"
    assert "'web_search' is not a function tool" in hosted.value.message
    assert "provider_options.openai.tools" in hosted.value.message
    assert typed.value.body["param"] == "max_output_tokens"
    assert missing.value.status_code == 404
    for error in (rate.value, rate_streamed.value):
        assert error.response.headers["retry-after"] == "7"
        assert error.body["type"] == "rate_limit_error"


async def test_an_error_mid_stream_is_streamed_as_openai_streams_it(door: SharedDoor):
    script = steps(
        {"text": "Partial "},
        {"text": "answer"},
        {"error": {"error_class": "server_error", "status": 500, "message": "the model fell over"}},
    )
    body = {"model": "mock:echo", "input": "x", "stream": True, "provider_options": script}
    client = sdk(door)
    with trio.fail_after(30):
        seen: list[str] = []
        with pytest.raises(openai.APIError) as raised:
            await stream_all(client, seen, model="mock:echo", input="x", extra_body={"provider_options": script})
        headers = {"authorization": f"Bearer {door.key}"}
        async with (
            httpx.AsyncClient(base_url=door.url, headers=headers) as http,
            http.stream("POST", "/v1/responses", json=body) as reply,
        ):
            events = [json.loads(line[6:]) async for line in reply.aiter_lines() if line.startswith("data: ")]
    assert "the model fell over" in raised.value.message
    assert seen[-1] == "response.output_item.done"  # the message, done before the error
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["error", "response.failed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    error, failed = events[-2:]
    assert error["message"] == error["error"]["message"]
    assert error["message"].startswith("the model fell over")
    assert error["code"] is None and error["error"]["type"] == "server_error"
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": "server_error", "message": error["message"]}
    (message,) = failed["response"]["output"]
    assert message["content"][0]["text"] == "Partial answer"


async def test_a_client_that_hangs_up_cancels_the_call(door: SharedDoor):
    slow = steps(*[{"text": f"w{i} ", "delay": 0.05} for i in range(400)])
    body = {"model": "mock:echo", "input": "x", "stream": True, "provider_options": slow}
    assert door.daemon is not None
    async with Client(door.daemon.runtime_dir, watch_bus=True) as watcher:
        with trio.fail_after(30):
            headers = {"authorization": f"Bearer {door.key}"}
            async with (
                httpx.AsyncClient(base_url=door.url, headers=headers) as http,
                http.stream("POST", "/v1/responses", json=body) as reply,
            ):
                async for line in reply.aiter_lines():
                    if '"w1 "' in line:
                        break  # and hang up
            while (await watcher.bus_events.receive()).name != "llm.call_cancelled":
                pass
            status = await watcher.status()
    assert status.in_flight == 0


async def stream_all(client: openai.AsyncOpenAI, seen: list[str], **kwargs: Any) -> None:
    """Read a whole stream through the SDK's helper, noting each event's type in `seen`."""
    async with client.responses.stream(**kwargs) as stream:
        async for event in stream:
            seen.append(event.type)
