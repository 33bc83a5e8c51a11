"""Tools with handlers, in process: schemas from signatures, argument checks, and how one
turn's calls run (concurrently, in order, failures as error results, timeouts)."""

from __future__ import annotations

import threading
from typing import Literal

import msgspec
import pytest
import trio

from trunkline import Tool, tool
from trunkline.protocol import codec
from trunkline.protocol.messages import Message, Request, ToolCallPart
from trunkline.tools import run_calls


def call(name: str, arguments: dict | None, n: int = 0) -> ToolCallPart:
    return ToolCallPart(
        id=f"tu_{n}", name=name, arguments=arguments, raw_arguments="{oops" if arguments is None else None
    )


def test_a_schema_from_type_hints_and_docstring():
    @tool
    def search(query: str, limit: int = 10, kind: Literal["web", "news"] = "web", tool_call_id: str = "") -> str:
        """Search the web.

        Args:
            query: what to look for
            limit: at most this many results
        """
        return ""

    assert search.name == "search" and search.description == "Search the web." and search.active
    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "default": 10, "description": "at most this many results"},
            "kind": {"enum": ["news", "web"], "default": "web"},
        },
        "required": ["query"],
    }  # the injected tool_call_id is not the model's to give


def test_a_tool_is_sent_as_its_definition_alone():
    t = Tool(name="lookup", description="find", execute=lambda: None, timeout_s=3)
    request = Request(model="mock:echo", messages=[Message.user("x")], tools=[t])
    sent = msgspec.msgpack.decode(codec.encode(request))
    assert sent["tools"] == [
        {"name": "lookup", "description": "find", "parameters": {"type": "object", "properties": {}}}
    ]
    assert not Tool(name="passive").active


@pytest.mark.parametrize("name", ["1abc", "has space", "x" * 65, ""])
def test_tool_names_are_checked_when_defined(name):
    with pytest.raises(ValueError, match="tool name"):
        Tool(name=name)


def test_parameters_must_be_an_object_schema():
    with pytest.raises(ValueError, match='"type": "object"'):
        Tool(name="t", parameters={"type": "string"})


async def test_calls_run_concurrently_and_results_keep_the_calls_order():
    both = trio.Event()
    arrived: list[str] = []

    @tool
    async def slow(tag: str) -> str:
        arrived.append(tag)
        if len(arrived) == 2:
            both.set()
        await both.wait()  # only finishes if the other call runs at the same time
        return tag

    with trio.fail_after(5):
        results = await run_calls([call("slow", {"tag": "a"}, 0), call("slow", {"tag": "b"}, 1)], {"slow": slow}, [])
    assert [(r.tool_call_id, r.content) for r in results] == [("tu_0", "a"), ("tu_1", "b")]


async def test_blocking_handlers_run_side_by_side_in_threads():
    barrier = threading.Barrier(3, timeout=5)

    @tool
    def blocking(n: int) -> int:
        barrier.wait()  # three threads must be waiting at once
        return n * 2

    with trio.fail_after(10):
        results = await run_calls([call("blocking", {"n": i}, i) for i in range(3)], {"blocking": blocking}, [])
    assert [r.content for r in results] == ["0", "2", "4"]


async def test_arguments_are_validated_before_the_handler_runs():
    ran = []

    @tool
    def area(width: int, height: int) -> int:
        ran.append((width, height))
        return width * height

    results = await run_calls(
        [call("area", {"width": "3", "height": 2}), call("area", {"width": 3}), call("area", None)], {"area": area}, []
    )
    assert ran == []
    assert [r.is_error for r in results] == [True, True, True]
    assert results[0].content == "invalid arguments for area: width: '3' is not of type 'integer'"
    assert results[1].content == "invalid arguments for area: (arguments): 'height' is a required property"
    assert results[2].content == "the arguments of area are not a JSON object: '{oops'"


async def test_a_timeout_is_an_error_result(autojump_clock):
    @tool(timeout_s=30)
    async def stuck(x: int) -> str:
        await trio.sleep_forever()
        return ""

    @tool
    async def quick(x: int) -> dict:
        return {"x": x}

    results = await run_calls(
        [call("stuck", {"x": 1}), call("quick", {"x": 2}, 1)], {"stuck": stuck, "quick": quick}, []
    )
    assert results[0].is_error and results[0].content == "stuck did not finish within 30s"
    assert results[1].content == '{"x":2}' and not results[1].is_error
    assert trio.current_time() == pytest.approx(30)


async def test_handlers_can_ask_for_the_conversation_and_their_call_id():
    seen = {}

    @tool
    def context(q: str, messages: list, tool_call_id: str) -> str:
        seen.update(q=q, n=len(messages), id=tool_call_id)
        return "ok"

    await run_calls([call("context", {"q": "x"}, 7)], {"context": context}, [Message.user("a"), Message.user("b")])
    assert seen == {"q": "x", "n": 2, "id": "tu_7"}
