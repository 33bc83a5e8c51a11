"""The unified-client seed's cross-provider validation matrix, through the high-level API,
the real daemon and its sockets: every row runs on every provider in `HARNESSES` (the
mock, and each real provider against its fake upstream on 127.0.0.1)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import trio

import trunkline
from fakes.providers import HARNESSES, Failure, Harness, SharedHarnesses, Turn
from helpers import check_invariants
from trunkline import Client, ImagePart, Message, tool
from trunkline.errors import AuthenticationError, NoObjectGeneratedError, RateLimitError
from trunkline.protocol.messages import Finish, StreamStart, TextDelta

pytestmark = pytest.mark.e2e

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
CAT = "https://example.com/cat.png"

#: The image of test_image_input as each provider's wire carries it.
IMAGE_AS_SENT: dict[str, dict[str, Any]] = {
    "anthropic": {
        "base64": {"type": "base64", "media_type": "image/png", "data": PNG},
        "url": {"type": "url", "url": CAT},
    },
    "openai": {
        "base64": {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
        "url": {"type": "input_image", "image_url": CAT, "detail": "auto"},
    },
    "gemini": {
        "base64": {"inlineData": {"mimeType": "image/png", "data": PNG}},
        "url": {"fileData": {"fileUri": CAT, "mimeType": "image/png"}},
    },
    "openai_compat": {
        "base64": {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        "url": {"type": "image_url", "image_url": {"url": CAT}},
    },
    # Ollama takes base64 only: an image URL is dropped, with a warning (nothing fetches it)
    "ollama": {"base64": PNG, "url": None},
}


@pytest.fixture(scope="module")
def harnesses() -> Iterator[SharedHarnesses]:
    with SharedHarnesses() as shared:
        yield shared


@pytest.fixture(params=sorted(HARNESSES))
def provider(request, harnesses: SharedHarnesses) -> Harness:
    return harnesses.get(request.param)


def weather_tool(log: list[dict[str, Any]]) -> Any:
    @tool
    async def get_weather(city: str) -> str:
        """The weather now in a city."""
        log.append({"city": city})
        return f"18C and clear in {city}"

    return get_weather


async def test_simple_text(provider: Harness):
    fields = provider.script(Turn(text="Hello there."))
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            result = await trunkline.generate(
                provider.model, "Say hello in one sentence.", max_tokens=100, client=client, **fields
            )
    assert result.text == "Hello there." and result.finish_reason.reason == "stop"
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    for body in provider.sent():
        assert provider.max_tokens(body) == 100


async def test_streaming_text(provider: Harness):
    fields = provider.script(Turn(text="A haiku about code, streaming in."))
    with trio.fail_after(30):
        async with (
            Client(provider.daemon.runtime_dir) as client,
            trunkline.stream(provider.model, "Write a haiku.", client=client, **fields) as s,
        ):
            events = [e async for e in s]
            result = await s.result()
    check_invariants(events)
    assert type(events[0]) is StreamStart and type(events[-1]) is Finish
    assert "".join(e.text for e in events if type(e) is TextDelta) == result.text == "A haiku about code, streaming in."
    assert events[-1].response.usage.output_tokens == 30


@pytest.mark.parametrize("source", ["base64", "url"])
async def test_image_input(provider: Harness, source: str):
    image = ImagePart(data=PNG, media_type="image/png") if source == "base64" else ImagePart(url=CAT)
    fields = provider.script(Turn(text="A tiny black square."))
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            result = await trunkline.generate(
                provider.model, messages=[Message.user("What do you see?", image)], client=client, **fields
            )
    assert result.text == "A tiny black square."
    expected = IMAGE_AS_SENT.get(provider.name, {}).get(source)
    for body in provider.sent():
        assert provider.images(body) == ([expected] if expected is not None else [])
    if provider.sent() and expected is None:
        assert "unsupported_content" in {w.code for w in result.response.warnings}


async def test_single_tool_call_with_execution(provider: Harness):
    log: list[dict[str, Any]] = []
    fields = provider.script(Turn(calls=[("get_weather", {"city": "Paris"})]), Turn(text="It is 18C in Paris."))
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            result = await trunkline.generate(
                provider.model, "Weather in Paris?", tools=[weather_tool(log)], client=client, **fields
            )
    assert log == [{"city": "Paris"}]
    assert len(result.steps) == 2 and result.text == "It is 18C in Paris."
    (call,) = result.steps[0].tool_calls
    assert result.steps[0].tool_results[0].tool_call_id == call.id
    assert result.steps[0].tool_results[0].content == "18C and clear in Paris"
    sent = provider.sent()
    if sent:
        assert len(sent) == 2
        assert provider.tool_calls(sent[1]) == [provider.call_id(0, 0)]
        assert provider.tool_results(sent[1]) == [(provider.call_id(0, 0), "18C and clear in Paris")]


async def test_parallel_tool_calls(provider: Harness):
    log: list[dict[str, Any]] = []
    fields = provider.script(
        Turn(calls=[("get_weather", {"city": "San Francisco"}), ("get_weather", {"city": "New York"})]),
        Turn(text="San Francisco: 18C. New York: 18C."),
    )
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            result = await trunkline.generate(
                provider.model,
                "Weather in San Francisco and New York?",
                tools=[weather_tool(log)],
                max_tool_rounds=3,
                client=client,
                **fields,
            )
    assert sorted(c["city"] for c in log) == ["New York", "San Francisco"]
    assert len(result.steps) >= 2 and "San Francisco" in result.text and "New York" in result.text
    first = result.steps[0]
    assert [r.tool_call_id for r in first.tool_results] == [c.id for c in first.tool_calls]
    sent = provider.sent()
    if sent:
        assert len(sent) == 2  # both results went back in one continuation, in the calls' order
        last = provider.last_turn(sent[1])
        assert [call for call, _ in provider.tool_results(last)] == [provider.call_id(0, 0), provider.call_id(0, 1)]
        assert provider.tool_calls(sent[1]) == [provider.call_id(0, 0), provider.call_id(0, 1)]


async def test_a_loop_of_three_rounds(provider: Harness):
    log: list[dict[str, Any]] = []
    cities = ["Oslo", "Rome", "Lima"]
    fields = provider.script(
        *[Turn(calls=[("get_weather", {"city": c})]) for c in cities], Turn(text="Done with three cities.")
    )
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            result = await trunkline.generate(
                provider.model,
                "Three cities, one at a time.",
                tools=[weather_tool(log)],
                max_tool_rounds=5,
                client=client,
                **fields,
            )
    assert [c["city"] for c in log] == cities
    assert len(result.steps) == 4 and result.text == "Done with three cities."
    assert [m.role for m in result.messages] == ["user"] + ["assistant", "tool"] * 3 + ["assistant"]
    sent = provider.sent()
    if sent:
        # the prompt, then each round's call and result
        assert len(sent) == 4 and [len(provider.conversation(b)) for b in sent] == [1, 3, 5, 7]
        assert provider.tool_results(sent[3]) == [
            (provider.call_id(n, 0), f"18C and clear in {c}") for n, c in enumerate(cities)
        ]


async def test_streaming_with_tool_calls(provider: Harness):
    log: list[dict[str, Any]] = []
    fields = provider.script(Turn(text="Checking.", calls=[("get_weather", {"city": "Kyiv"})]), Turn(text="Kyiv: 18C."))
    with trio.fail_after(30):
        async with (
            Client(provider.daemon.runtime_dir) as client,
            trunkline.stream(
                provider.model, "Weather in Kyiv?", tools=[weather_tool(log)], client=client, **fields
            ) as s,
        ):
            events = [e async for e in s]
            result = await s.result()
    assert log == [{"city": "Kyiv"}]
    boundary = [i for i, e in enumerate(events) if isinstance(e, trunkline.StepFinish)]
    assert len(boundary) == 1
    check_invariants(events[: boundary[0]])
    assert "".join(e.text for e in events if type(e) is TextDelta) == "Checking.Kyiv: 18C."
    assert result.text == "Kyiv: 18C." and len(result.steps) == 2


#: Providers whose (strict) structured output refuses a schema with an object not closed.
NEEDS_CLOSED_OBJECTS = {"anthropic", "openai"}


class Person(msgspec.Struct):
    name: str
    age: int


async def test_generate_object(provider: Harness):
    fields = provider.script(Turn(text='{"name": "Alice", "age": 30}'))
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            result = await trunkline.generate_object(
                provider.model, "Extract: Alice is 30 years old", schema=Person, client=client, **fields
            )
            assert result.object == Person(name="Alice", age=30)
            fields = provider.script(Turn(text='{"name": "Alice", "age": "thirty"}'))
            with pytest.raises(NoObjectGeneratedError) as caught:
                await trunkline.generate_object(
                    provider.model, "Extract: Alice is thirty", schema=Person, client=client, **fields
                )
    assert caught.value.text == '{"name": "Alice", "age": "thirty"}'
    assert "age: 'thirty' is not of type 'integer'" in caught.value.validation_error
    for body in provider.sent():
        schema = provider.output_schema(body)
        assert schema is not None and schema["required"] == ["name", "age"]
        assert schema["properties"]["age"]["type"] == "integer"
        if provider.name in NEEDS_CLOSED_OBJECTS:
            assert schema["additionalProperties"] is False


async def test_stream_object(provider: Harness):
    fields = provider.script(Turn(text='{"name": "Alice", "age": 30}'))
    with trio.fail_after(30):
        async with (
            Client(provider.daemon.runtime_dir) as client,
            trunkline.stream_object(
                provider.model, "Extract: Alice is 30", schema=Person, client=client, **fields
            ) as s,
        ):
            partials = [p async for p in s]
            person = await s.object()
    assert person == Person(name="Alice", age=30)
    assert partials[-1] == {"name": "Alice", "age": 30} and len(partials) > 1
    assert all(set(p) <= {"name", "age"} for p in partials)
    for body in provider.sent():
        assert provider.output_schema(body)["required"] == ["name", "age"]


async def test_reasoning_tokens(provider: Harness):
    fields = provider.script(
        Turn(reasoning="Two plus two is four, since 2+2=4.", text="4", output_tokens=40, reasoning_tokens=25)
    )
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            result = await trunkline.generate(provider.model, "2+2?", reasoning_effort="low", client=client, **fields)
    assert result.text == "4" and result.reasoning == "Two plus two is four, since 2+2=4."
    usage = result.usage
    assert 0 < usage.reasoning_tokens <= usage.output_tokens == 40
    if provider.reasoning_exact:
        assert usage.reasoning_tokens == 25 and not usage.estimated
    else:
        assert usage.estimated_fields == ["reasoning_tokens"]


async def test_invalid_key_is_an_authentication_error(provider: Harness):
    # Providers quote the key they were given (OpenAI masks part of it): the daemon must not pass it on.
    fields = provider.fail(Failure(401, "authentication", f"invalid x-api-key: {provider.key}"))
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            with pytest.raises(AuthenticationError) as caught:
                await trunkline.generate(provider.model, "hi", client=client, **fields)
    assert caught.value.status == 401 and not caught.value.retryable
    assert not provider.key or provider.key not in str(caught.value)


async def test_rate_limit_is_a_rate_limit_error(provider: Harness):
    fields = provider.fail(Failure(429, "rate_limit", "slow down", retry_after_s=7))
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            with pytest.raises(RateLimitError) as caught:
                await trunkline.generate(provider.model, "hi", client=client, **fields)
    assert caught.value.status == 429 and caught.value.retryable and caught.value.retry_after == 7


async def test_usage_is_accurate_per_step_and_in_total(provider: Harness):
    log: list[dict[str, Any]] = []
    fields = provider.script(
        Turn(calls=[("get_weather", {"city": "Oslo"})], input_tokens=300, output_tokens=20),
        Turn(text="Cold.", input_tokens=350, output_tokens=7),
    )
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            result = await trunkline.generate(
                provider.model, "Oslo?", tools=[weather_tool(log)], client=client, **fields
            )
    assert [(s.usage.input_tokens, s.usage.output_tokens) for s in result.steps] == [(300, 20), (350, 7)]
    total = result.total_usage
    assert (total.input_tokens, total.output_tokens, total.total_tokens) == (650, 27, 677)
    if provider.priced:
        assert result.total_cost_usd is not None and result.total_cost_usd > 0
        assert result.total_cost_usd == pytest.approx(sum(s.cost_usd for s in result.steps))
    else:
        assert result.total_cost_usd is None and all(s.cost_usd is None for s in result.steps)


async def test_cache_reads_on_the_second_turn(provider: Harness):
    fields = provider.script(
        Turn(text="First.", input_tokens=2000, cache_write_tokens=1800),
        Turn(text="Second.", input_tokens=2050, cache_read_tokens=1800),
    )
    system = "You are a careful assistant. " * 100
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            first = await trunkline.generate(provider.model, "Turn one.", system=system, client=client, **fields)
            second = await trunkline.generate(
                provider.model, messages=[*first.messages, Message.user("Turn two.")], client=client, **fields
            )
    assert first.usage.cache_write_tokens == (1800 if provider.reports_cache_writes else 0)
    assert first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens == 1800 > second.usage.input_tokens / 2
    sent = provider.sent()
    if sent:
        assert len(sent) == 2
        provider.check_cache(*sent)


async def test_provider_options_pass_through(provider: Harness):
    options, check = provider.options()
    fields = provider.script(Turn(text="ok"))
    merged = {
        **fields.get("provider_options", {}),
        **{k: {**fields.get("provider_options", {}).get(k, {}), **v} for k, v in options.items()},
    }
    with trio.fail_after(30):
        async with Client(provider.daemon.runtime_dir) as client:
            result = await trunkline.generate(
                provider.model, "hi", client=client, **{**fields, "provider_options": merged}
            )
    assert result.text == "ok"
    check(result.response, provider.sent())


@pytest.fixture(params=sorted(set(HARNESSES) - {"mock"}))
def real_provider(request, harnesses: SharedHarnesses) -> Harness:
    return harnesses.get(request.param)


async def test_a_loop_continues_on_another_provider(real_provider: Harness):
    """A conversation a loop produced on the mock goes on on a real provider, and back."""
    mock = HARNESSES["mock"]()
    log: list[dict[str, Any]] = []
    weather = weather_tool(log)
    with trio.fail_after(30):
        async with Client(real_provider.daemon.runtime_dir) as client:
            on_mock = await trunkline.generate(
                mock.model,
                "Weather in Oslo?",
                tools=[weather],
                client=client,
                **mock.script(Turn(calls=[("get_weather", {"city": "Oslo"})]), Turn(text="Oslo is clear.")),
            )
            fields = real_provider.script(Turn(calls=[("get_weather", {"city": "Rome"})]), Turn(text="Rome too."))
            there = await trunkline.generate(
                real_provider.model,
                messages=[*on_mock.messages, Message.user("And Rome?")],
                tools=[weather],
                client=client,
                **fields,
            )
            back = await trunkline.generate(
                "mock:basic", messages=[*there.messages, Message.user("Thanks!")], client=client
            )
    assert log == [{"city": "Oslo"}, {"city": "Rome"}]
    assert there.text == "Rome too." and back.text == "Thanks!"
    assert [m.role for m in there.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    body = real_provider.sent()[-1]
    uses = real_provider.tool_calls(body)
    # the mock's call and the provider's, each answered, in order
    assert len(uses) == 2 and uses[1] == real_provider.call_id(0, 0)
    assert real_provider.tool_results(body) == [(uses[0], "18C and clear in Oslo"), (uses[1], "18C and clear in Rome")]


REAL = sorted(set(HARNESSES) - {"mock"})


@pytest.fixture(params=REAL)
def two_providers(request, harnesses: SharedHarnesses) -> tuple[Harness, Harness]:
    """A real provider and the next one (anthropic -> gemini -> ollama -> openai -> openai_compat -> anthropic)."""
    return harnesses.get(request.param), harnesses.get(REAL[(REAL.index(request.param) + 1) % len(REAL)])


async def test_a_loop_continues_from_one_real_provider_to_the_next(two_providers: tuple[Harness, Harness]):
    """A loop with reasoning on one provider goes on on the next: the first one's reasoning
    is dropped there with a warning, and every call keeps its answer."""
    here, there = two_providers
    log: list[dict[str, Any]] = []
    weather = weather_tool(log)
    with trio.fail_after(30):
        async with Client(here.daemon.runtime_dir) as first, Client(there.daemon.runtime_dir) as second:
            fields = here.script(
                Turn(reasoning="Oslo first.", calls=[("get_weather", {"city": "Oslo"})], reasoning_tokens=5),
                Turn(text="Oslo is clear."),
            )
            start = await trunkline.generate(
                here.model, "Weather in Oslo?", tools=[weather], reasoning_effort="low", client=first, **fields
            )
            fields = there.script(Turn(calls=[("get_weather", {"city": "Rome"})]), Turn(text="Rome too."))
            moved = await trunkline.generate(
                there.model,
                messages=[*start.messages, Message.user("And Rome?")],
                tools=[weather],
                reasoning_effort="low",
                client=second,
                **fields,
            )
    assert log == [{"city": "Oslo"}, {"city": "Rome"}] and moved.text == "Rome too."
    assert "thinking_dropped" in {w.code for w in moved.steps[0].response.warnings}
    body = there.sent()[-1]
    uses = there.tool_calls(body)
    assert len(uses) == 2 and uses[1] == there.call_id(0, 0)
    assert there.tool_results(body) == [(uses[0], "18C and clear in Oslo"), (uses[1], "18C and clear in Rome")]
    assert "Oslo first." not in json.dumps(body)
