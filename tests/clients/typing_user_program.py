"""A user's program written the ways README.md and the docstrings show, checked by
mypy --strict in test_typing.py (never run, never collected): a documented form a
type checker refuses is a bug of ours."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec

import trunkline
from trunkline import Client, Middleware, SyncClient, Tool, TrunklineError, tool
from trunkline.middleware import CompleteNext, StreamNext
from trunkline.protocol.messages import Message, Request, Response, StreamEvent, TextDelta, ToolCallPart


@trunkline.tool
def get_weather(city: str) -> str:
    """The weather now in a city."""
    return f"18°C and clear in {city}"


@tool(timeout_s=5.0, description="Add one.")
async def add_one(x: int) -> int:
    return x + 1


def lookup(query: str) -> str:
    return query


# A tool with a handler, built by hand, and a passive one (its calls come back to the caller).
lookup_tool = Tool(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
    execute=lookup,
    timeout_s=2.0,
)
ask_user = Tool(name="ask_user", parameters={"type": "object", "properties": {}})
handler_or_none = lookup_tool.execute
seconds: float | None = lookup_tool.timeout_s
is_active: bool = ask_user.active
still_callable = get_weather("Paris")


class Person(msgspec.Struct):
    name: str
    age: int


class Log(Middleware):
    async def complete(self, request: Request, call_next: CompleteNext) -> Response:
        return await call_next(request)

    async def stream(self, request: Request, call_next: StreamNext) -> AsyncIterator[StreamEvent]:
        async for event in call_next(request):
            yield event


async def with_a_client() -> str:
    async with Client(middleware=[Log()], timeout_s=10.0) as client:
        response = await client.complete("mock:echo", "hello", temperature=0.2, max_tokens=100)
        async with client.stream("mock:echo", [Message.user("hello")], tools=[get_weather, lookup_tool]) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    print(event.text, end="")
            final = await stream.response()
        models = await client.list_models("mock")
        newest = await client.latest_model("mock", "tools")
        print(response.text, final.usage.output_tokens, [m.id for m in models], newest)
        return response.text


async def with_the_loop() -> None:
    result = await trunkline.generate(
        "mock:echo", "Weather in Paris?", tools=[get_weather, add_one, lookup_tool, ask_user], max_tool_rounds=3
    )
    for step in result.steps:
        print([call.name for call in step.tool_calls], [r.content for r in step.tool_results])
    async with trunkline.stream("mock:echo", "hi", tools=[get_weather]) as events:
        async for text in events.text_stream:
            print(text)
    person = await trunkline.generate_object("mock:echo", "Alice is 30.", schema=Person)
    print(person.object)


def fix_call(call: ToolCallPart, error: str) -> ToolCallPart | None:
    return ToolCallPart(id=call.id, name="lookup", arguments=call.arguments) if call.name == "look_up" else None


def log_retry(error: TrunklineError, attempt: int, delay: float) -> None:
    print(f"retry {attempt} in {delay:.1f}s after {error}")


async def with_the_seed_hooks() -> None:
    result = await trunkline.generate(
        "mock:echo",
        "Look up 'trunk'.",
        tools=[lookup_tool, ask_user],
        max_tool_rounds=8,
        stop_when=[trunkline.step_count_is(4), trunkline.has_tool_call("ask_user")],
        repair_tool_call=fix_call,
        on_retry=log_retry,
    )
    print(result.stopped, result.reasoning, result.response.reasoning)
    async with Client() as client:
        response = await client.complete("mock:echo", "hi", on_retry=log_retry)
        print(response.reasoning)
        async with client.stream("mock:echo", "hi", on_retry=log_retry) as stream:
            async for _ in stream:
                so_far = stream.partial_response
                print(so_far.text if so_far is not None else "")
    async with trunkline.stream("mock:echo", "hi", stop_when=lambda steps: len(steps) > 2) as events:
        async for _ in events:
            print(events.partial_response)


def blocking() -> str:
    with SyncClient() as client:
        return client.complete("mock:echo", "hi").text
