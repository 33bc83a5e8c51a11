"""Each shipped provider follows the base-URL variable its official SDK reads, through the
real daemon: the calls reach the fake server the variable names, not the configured URL."""

from __future__ import annotations

import pytest
import trio

from fakes.gemini_stream import chunk, sse
from fakes.upstream import FakeUpstream, Reply
from trunkline import Client

pytestmark = pytest.mark.e2e

ANTHROPIC_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "From the variable's server."}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 5, "output_tokens": 4},
}
OLLAMA_ANSWER = {
    "model": "qwen3:8b",
    "message": {"role": "assistant", "content": "From the variable's server."},
    "done": True,
    "done_reason": "stop",
    "prompt_eval_count": 5,
    "eval_count": 4,
}


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


async def ask(start_daemon, config: dict, env: dict, model: str) -> str:
    daemon = await start_daemon(config, env=env)
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            return (await client.complete(model, "hi")).text


async def test_anthropic_base_url_replaces_the_configured_url(start_daemon, upstream):
    upstream.route("POST", "/v1/messages", Reply.json(ANTHROPIC_ANSWER))
    env = {"ANTHROPIC_API_KEY": "fake-anthropic-key-0123456789", "ANTHROPIC_BASE_URL": upstream.base_url}
    assert await ask(start_daemon, {}, env, "anthropic:claude-sonnet-4-5") == "From the variable's server."
    assert len(upstream.sent("/v1/messages")) == 1


async def test_gemini_base_url_replaces_the_configured_url(start_daemon, upstream):
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    upstream.route("POST", path, Reply.sse(sse(chunk({"text": "From the variable's server."}, finish="STOP"))))
    env = {"GEMINI_API_KEY": "fake-gemini-key-0123456789", "GOOGLE_API_KEY": "", "GEMINI_BASE_URL": upstream.base_url}
    assert await ask(start_daemon, {}, env, "gemini:gemini-2.5-flash") == "From the variable's server."
    assert len(upstream.sent(path)) == 1


async def test_ollama_host_without_a_scheme_is_followed(start_daemon, upstream):
    # OLLAMA_HOST as `ollama serve` users set it: host:port, no scheme.
    upstream.route("POST", "/api/chat", Reply.json(OLLAMA_ANSWER))
    upstream.route("GET", "/api/tags", Reply.json({"models": [{"name": "qwen3:8b"}]}))
    host_port = upstream.base_url.removeprefix("http://")
    config = {"providers": {"ollama": {"enabled": True}}}
    assert await ask(start_daemon, config, {"OLLAMA_HOST": host_port}, "ollama:qwen3:8b") == (
        "From the variable's server."
    )
    assert len(upstream.sent("/api/chat")) == 1
