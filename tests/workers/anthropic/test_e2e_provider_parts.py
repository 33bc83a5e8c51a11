"""Anthropic's opaque blocks end to end: the real daemon, sockets and client, a fake Anthropic on 127.0.0.1
replaying recorded responses (a `pause_turn` web search, a compaction)."""

from __future__ import annotations

import json

import pytest
import trio

from fakes.upstream import FakeUpstream, Reply
from helpers import check_invariants
from trunkline import Client, Message
from trunkline.protocol.messages import ProviderPart, ProviderPartEvent

from .test_stream import RECORDINGS

pytestmark = pytest.mark.e2e

KEY = "fake-anthropic-key-never-to-be-seen-0123456789"
PYDANTIC = RECORDINGS / "pydantic+pydantic-ai"
PAUSE = PYDANTIC / "tests__models__cassettes__test_anthropic__test_pause_turn_web_search_streaming_vcr"
COMPACTION = PYDANTIC / "tests__models__cassettes__test_anthropic__test_anthropic_compaction_usage_with_cache_streaming"


def recorded(case, suffix: str = "") -> bytes:
    path = case.parent / (case.name + suffix) / "response.body"
    if not path.exists():
        pytest.skip("../shared/recordings/anthropic is not present")
    return path.read_bytes()


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    return await start_daemon(
        {"providers": {"anthropic": {"base_url": upstream.base_url}}}, env={"ANTHROPIC_API_KEY": KEY}
    )


async def test_a_pause_turn_comes_back_whole_and_continues(daemon, upstream):
    paused, resumed = recorded(PAUSE, ".0"), recorded(PAUSE, ".1")
    upstream.route("POST", "/v1/messages", Reply.sse(paused, chunk_size=16384), Reply.sse(resumed, chunk_size=16384))
    question = "Run six web searches about San Francisco today, one at a time, then summarise."
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 15}
    options = {"anthropic": {"tools": [search]}}
    model = "anthropic:claude-sonnet-4-5"
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream(model, question, provider_options=options) as stream:
                async for ev in stream:
                    events.append(ev)
            check_invariants(events)
            first = events[-1].response
            assert first.finish_reason.raw == "pause_turn"
            # continue the paused turn: send it back as it came, as the last message
            async with client.stream(
                model, [Message.user(question), first.message], provider_options=options
            ) as stream:
                second = await stream.response()
    parts = [p for p in first.message.content if type(p) is ProviderPart]
    kinds = [p.kind for p in parts]
    assert kinds.count("server_tool_use") == 11 and kinds.count("web_search_tool_result") == 10
    assert all(p.api == "anthropic" and p.provider == "anthropic" and p.model is None for p in parts)
    # the stream carried each one as a single event, in its place among the other parts
    streamed = [e for e in events if type(e) is ProviderPartEvent]
    assert [(e.kind, e.data) for e in streamed] == [(p.kind, p.data) for p in parts]
    assert [type(p).__name__ for p in first.message.content][:4] == [
        "ThinkingPart",
        "TextPart",
        "ProviderPart",
        "ProviderPart",
    ]
    assert second.finish_reason.raw == "end_turn" and second.text
    # what reached Anthropic the second time: the paused turn, every block verbatim, in order
    body = upstream.sent("/v1/messages")[1].json()
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    sent = body["messages"][1]["content"]
    assert len(sent) == 25
    assert [b for b in sent if b["type"] not in ("thinking", "text")] == [p.data for p in parts]
    original = [json.loads(line[5:]) for line in paused.decode().splitlines() if line.startswith("data:")]
    starts = [e["content_block"] for e in original if e["type"] == "content_block_start"]
    assert [b["type"] for b in sent] == [b["type"] for b in starts]
    assert [t["type"] for t in body["tools"]] == ["web_search_20250305"]


async def test_a_compaction_is_billed_in_full_and_goes_back(daemon, upstream):
    upstream.route(
        "POST",
        "/v1/messages",
        Reply.sse(recorded(COMPACTION), chunk_size=100),
        Reply.json(
            {
                "id": "msg_2",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-6",
                "content": [{"type": "text", "text": "Hello again."}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 120, "output_tokens": 4},
            }
        ),
    )
    options = {
        "anthropic": {
            "beta_headers": ["compact-2026-01-12"],
            "context_management": {
                "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50000}}]
            },
        }
    }
    model = "anthropic:claude-sonnet-4-6"
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream(
                model, "Remember this context: ... Now say hello.", provider_options=options
            ) as stream:
                first = await stream.response()
            history = [
                Message.user("Remember this context: ... Now say hello."),
                first.message,
                Message.user("Once more."),
            ]
            second = await client.complete(model, history, provider_options=options)
            moved = await client.complete("mock:echo", history)  # the conversation moves elsewhere
    u = first.usage
    # the compaction step (100 in + 55,096 cache read, 83 out) is billed with the message (181 in, 8 out)
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (100 + 55096 + 181, 55096, 83 + 8)
    # Sonnet 4.6: $3 input, $0.30 cache read, $15 output per million tokens
    assert first.cost_usd == pytest.approx((281 * 3.00 + 55096 * 0.30 + 91 * 15.00) / 1e6)
    compaction = first.message.content[0]
    assert type(compaction) is ProviderPart and compaction.kind == "compaction"
    assert compaction.data["content"].startswith("The user provided a very long context")
    assert second.text == "Hello again."
    body = upstream.sent("/v1/messages")[1].json()
    assert (
        body["messages"][1]["content"][0]
        == compaction.data
        == {"type": "compaction", "content": compaction.data["content"]}
    )
    assert upstream.sent("/v1/messages")[1].headers["anthropic-beta"] == "compact-2026-01-12"
    assert moved.text == "Once more." and [w.code for w in moved.warnings] == ["provider_part_dropped"]
    assert "anthropic content (compaction)" in moved.warnings[0].message
