"""What an OpenAI or LiteLLM user types first, through the real client and daemon: dict
messages with string content, a plain function as a tool, OpenAI's tool dict, a string
tool_choice; and `@tool` keeps the function callable."""

from __future__ import annotations

import pytest
import trio

from trunkline import Client, generate, tool

pytestmark = pytest.mark.e2e


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def test_dict_messages_plain_functions_openai_tools_and_string_tool_choice(daemon):
    call = {
        "mock": {
            "turns": [
                [{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
                [{"text": "It is sunny."}],
            ]
        }
    }
    openai_tool = {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            echoed = await client.complete(
                "mock:echo", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}]
            )
            result = await generate(
                "mock:echo",
                messages=[{"role": "user", "content": "Weather in Paris?"}],
                tools=[get_weather, openai_tool],
                tool_choice="required",
                provider_options=call,
                max_tool_rounds=2,
                client=client,
            )
    assert echoed.text == "hello there"
    first = result.steps[0]
    assert [c.name for c in first.tool_calls] == ["get_weather"]
    assert [r.content for r in first.tool_results] == ["sunny in Paris"]
    assert result.text == "It is sunny."


def test_a_tool_decorated_function_stays_callable():
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    assert add(2, 3) == 5 and add.name == "add" and add.parameters["required"] == ["a", "b"]


@pytest.mark.parametrize(
    ("given", "mode", "name"),
    [
        ("required", "required", None),
        ("any", "required", None),
        ("none", "none", None),
        ("auto", "auto", None),
        ("lookup", "tool", "lookup"),
        ({"type": "function", "function": {"name": "lookup"}}, "tool", "lookup"),
    ],
)
def test_tool_choice_in_the_forms_people_write(given, mode, name):
    from trunkline import build_request

    choice = build_request("mock:echo", "x", tool_choice=given).tool_choice
    assert choice is not None and (choice.mode, choice.name) == (mode, name)


async def test_running_out_of_tool_rounds_with_calls_pending_is_a_warning(daemon):
    again = {"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    script = {"mock": {"turns": [[{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}], [again]]}}
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            result = await generate(
                "mock:echo", "Weather?", tools=[get_weather], provider_options=script, max_tool_rounds=1, client=client
            )
    assert [c.arguments for c in result.tool_calls] == [{"city": "Oslo"}]  # asked for, never run
    (warning,) = [w for w in result.warnings if w.code == "tool_rounds_exhausted"]
    assert "max_tool_rounds=1" in warning.message and "get_weather" in warning.message


SYNC_STREAM = (
    "import sys\n"
    "from trunkline import Message, SyncClient\n"
    "with SyncClient(sys.argv[1]) as client:\n"
    "    with client.stream('mock:echo', [Message.user('as Client.stream')]) as s:\n"
    "        print(''.join(s.text_stream), '|', s.response().text)\n"
)


async def test_sync_stream_takes_messages_and_gives_the_response_as_client_stream_does(daemon):
    import sys

    result = await trio.run_process(
        [sys.executable, "-c", SYNC_STREAM, str(daemon.runtime_dir)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "as Client.stream | as Client.stream"
