"""Ollama end to end: the real daemon and client against a fake Ollama on 127.0.0.1, and against none."""

from __future__ import annotations

import json

import pytest
import trio

from fakes.upstream import FakeUpstream, Reply
from helpers import REPO, check_invariants
from trunkline import Client, Message, Tool
from trunkline.errors import NetworkError, NotFoundError
from trunkline.protocol.messages import ToolCallEnd

pytestmark = pytest.mark.e2e

CASSETTES = REPO / "cassettes" / "ollama"


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    return await start_daemon({"providers": {"ollama": {"enabled": True, "base_url": upstream.base_url}}})


async def test_stream_and_continue_a_tool_conversation(daemon, upstream):
    upstream.route(
        "POST",
        "/api/chat",
        Reply(
            200,
            {"content-type": "application/x-ndjson"},
            (CASSETTES / "think-tools.ndjson").read_bytes().splitlines(keepends=True),
            delay_s=0.001,
        ),
        Reply.json(
            {
                "model": "qwen3:8b",
                "message": {"role": "assistant", "content": "It is -3°C."},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 40,
                "eval_count": 6,
            }
        ),
    )
    tools = [Tool(name="weather"), Tool(name="time")]
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream("ollama:qwen3:8b", "weather in Oslo?", tools=tools) as stream:
                async for ev in stream:
                    events.append(ev)
            first = events[-1].response
            calls = first.tool_calls
            history = [
                Message.user("weather in Oslo?"),
                first.message,
                Message.tool_result(calls[0].id, "-3°C"),
                Message.tool_result(calls[1].id, "noon"),
            ]
            second = await client.complete("ollama:qwen3:8b", history, tools=tools)
    check_invariants(events)
    assert [type(e) for e in events].count(ToolCallEnd) == 2
    assert first.finish_reason.reason == "tool_calls" and second.text == "It is -3°C."
    sent = upstream.sent("/api/chat")[1].json()
    assert sent["stream"] is True  # whole responses are streamed from Ollama too
    assert sent["messages"][1]["tool_calls"] == [
        {"function": {"name": "weather", "arguments": {"city": "Oslo"}}},
        {"function": {"name": "time", "arguments": {}}},
    ]
    assert sent["messages"][2:] == [
        {"role": "tool", "content": "-3°C", "tool_name": "weather"},
        {"role": "tool", "content": "noon", "tool_name": "time"},
    ]


async def test_ready_distinguishes_unknown_from_not_loaded(daemon, upstream):
    upstream.route("GET", "/api/tags", Reply.json({"models": [{"name": "qwen3:8b"}, {"name": "llama3.2:latest"}]}))
    upstream.route("GET", "/api/ps", Reply.json({"models": [{"name": "qwen3:8b"}]}))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            loaded = await client.ready("ollama:qwen3:8b")
            idle = await client.ready("ollama:llama3.2")
            unknown = await client.ready("ollama:mistral:7b")
    assert loaded.ok
    assert not idle.ok and idle.error.error_class == "model_not_loaded" and idle.error.retryable
    assert not unknown.ok and unknown.error.error_class == "not_found" and "ollama pull" in unknown.error.message


async def test_unknown_model_from_the_server(daemon, upstream):
    upstream.route(
        "POST",
        "/api/chat",
        Reply(
            404,
            {"content-type": "application/json"},
            [json.dumps({"error": 'model "nope" not found, try pulling it first'}).encode()],
        ),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(NotFoundError, match="not found"):
                await client.complete("ollama:nope", "hi")


async def test_when_ollama_is_not_running(start_daemon):
    daemon = await start_daemon(
        {"providers": {"ollama": {"enabled": True, "base_url": "http://127.0.0.1:9"}}, "retry": {"max_retries": 0}}
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            with pytest.raises(NetworkError, match="is Ollama running") as info:
                await client.complete("ollama:llama3.2", "hi")
            assert info.value.retryable
            # The worker probes as it starts and the supervisor announces the change on the bus;
            # the bus is watched before status is asked, so the change cannot slip between them.
            status = {w.provider: w for w in (await client.status()).workers}["ollama"]
            while status.unreachable is None:
                ev = await client.bus_events.receive()
                if ev.name == "worker.unreachable" and ev.provider == "ollama":
                    status = {w.provider: w for w in (await client.status()).workers}["ollama"]
    assert status.state == "running" and "is Ollama running" in status.unreachable
