"""Provider rules the workers apply, through the real daemon against fake upstreams: what
reaches the provider is what its API takes, and the response says what was changed."""

from __future__ import annotations

import pytest
import trio

import fakes.openai_responses as oa
from fakes.gemini_stream import chunk, sse
from fakes.upstream import FakeUpstream, Reply
from trunkline import Client, Request
from trunkline.protocol.messages import Message

pytestmark = pytest.mark.e2e

KEYS = {
    "OPENAI_API_KEY": "sk-fake-openai-key-0123456789abcdef",
    "GEMINI_API_KEY": "fake-gemini-key-0123456789",
    "GOOGLE_API_KEY": "",
    "ANTHROPIC_API_KEY": "fake-anthropic-key-0123456789",
}
ANTHROPIC_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Done."}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 5, "output_tokens": 2},
}


def gemini_path(model: str) -> str:
    return f"/v1beta/models/{model}:streamGenerateContent"


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    url = upstream.base_url
    providers = {"openai": {"base_url": url + "/v1"}, "gemini": {"base_url": url}, "anthropic": {"base_url": url}}
    return await start_daemon({"providers": providers}, env=KEYS)


async def complete(daemon, request: Request):
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            return await client.complete(request)


def codes(response) -> list[str]:
    return [w.code for w in response.warnings]


async def test_responses_max_output_tokens_below_sixteen_is_raised(daemon, upstream):
    upstream.route("POST", "/v1/responses", Reply.sse(oa.sse(oa.events([oa.message("msg_1", "Hi.")]))))
    response = await complete(daemon, Request(model="openai:gpt-4.1", messages=[Message.user("hi")], max_tokens=5))
    assert upstream.sent("/v1/responses")[0].json()["max_output_tokens"] == 16
    assert "max_tokens_raised" in codes(response)


async def test_gemini_budget_range_stop_sequences_and_a_callers_thinking_config(daemon, upstream):
    lite, flash = "gemini-2.5-flash-lite", "gemini-2.5-flash"
    answer = Reply.sse(sse(chunk({"text": "Done."}, finish="STOP")))
    upstream.route("POST", gemini_path(lite), answer)
    upstream.route("POST", gemini_path(flash), answer)
    stops = ["1", "2", "3", "4", "5", "6"]
    first = await complete(
        daemon,
        Request(model=f"gemini:{lite}", messages=[Message.user("hi")], reasoning_effort="max", stop_sequences=stops),
    )
    gen = upstream.sent(gemini_path(lite))[0].json()["generationConfig"]
    assert gen["thinkingConfig"]["thinkingBudget"] == 24576 and gen["stopSequences"] == stops[:5]
    assert "stop_sequences_truncated" in codes(first)
    second = await complete(
        daemon,
        Request(
            model=f"gemini:{flash}",
            messages=[Message.user("hi")],
            reasoning_effort="low",
            provider_options={"gemini": {"thinking_config": {"thinkingBudget": 30000}}},
        ),
    )
    gen = upstream.sent(gemini_path(flash))[0].json()["generationConfig"]
    assert gen["thinkingConfig"] == {"thinkingBudget": 24576}
    assert {"reasoning_effort_overridden", "thinking_budget_changed"} <= set(codes(second))


async def test_gemini_3_flash_takes_no_level_above_high(daemon, upstream):
    model = "gemini-3-flash-preview"
    upstream.route("POST", gemini_path(model), Reply.sse(sse(chunk({"text": "Done."}, finish="STOP", model=model))))
    response = await complete(
        daemon, Request(model=f"gemini:{model}", messages=[Message.user("hi")], reasoning_effort="xhigh")
    )
    sent = upstream.sent(gemini_path(model))[0].json()["generationConfig"]["thinkingConfig"]
    assert sent == {"thinkingLevel": "HIGH", "includeThoughts": True}
    assert any("xhigh" in w.message for w in response.warnings)


async def test_an_anthropic_thinking_budget_is_kept_under_the_callers_max_tokens(daemon, upstream):
    upstream.route("POST", "/v1/messages", Reply.json(ANTHROPIC_ANSWER))
    response = await complete(
        daemon,
        Request(
            model="anthropic:claude-sonnet-4-5",
            messages=[Message.user("hi")],
            max_tokens=8000,
            reasoning_effort="high",
            provider_options={"anthropic": {"thinking": {"type": "enabled", "budget_tokens": 20000}}},
        ),
    )
    sent = upstream.sent("/v1/messages")[0].json()
    assert sent["max_tokens"] == 8000 and sent["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert {"reasoning_effort_overridden", "thinking_budget_changed"} <= set(codes(response))
