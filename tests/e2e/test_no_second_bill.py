"""A request that has received output is never sent again: the provider billed what it
generated, and a retry would bill the caller a second time.

For each provider, through the real daemon and client against a fake upstream on
127.0.0.1: a whole-response `complete()` (nothing reaches the client before the
end, so only the worker knows output arrived) whose stream sends text and then an
error of a retryable class. The upstream is called once; the error carries the
text as its partial. The upstream's second scripted reply, a success, would
show a retry.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from fakes import gemini_stream as gs
from fakes import openai_responses as oa
from fakes.upstream import FakeUpstream, Reply
from helpers import steps
from trunkline import Client
from trunkline.errors import TrunklineError

pytestmark = pytest.mark.e2e

TEXT = "paid for "


def anthropic_stream() -> Reply:
    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    return Reply.sse(
        "".join(
            [
                event(
                    "message_start",
                    {
                        "message": {
                            "id": "msg_1",
                            "type": "message",
                            "role": "assistant",
                            "model": "claude-sonnet-4-5",
                            "content": [],
                            "stop_reason": None,
                            "usage": {"input_tokens": 10, "output_tokens": 1},
                        }
                    },
                ),
                event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
                event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": TEXT}}),
                event("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ]
        )
    )


def openai_stream() -> Reply:
    lifecycle = oa.events([oa.message("msg_1", TEXT)])
    upto = next(i for i, e in enumerate(lifecycle) if e["type"] == "response.output_text.delta") + 1
    failed = {
        "type": "response.failed",
        "sequence_number": upto,
        "response": {
            "id": "resp_1",
            "object": "response",
            "status": "failed",
            "output": [],
            "error": {"code": "rate_limit_exceeded", "message": "Rate limit reached"},
        },
    }
    head = [{**e, "delta": TEXT} if e["type"] == "response.output_text.delta" else e for e in lifecycle[:upto]]
    return Reply.sse(oa.sse([*head, failed]))


def gemini_stream() -> Reply:
    return Reply.sse(
        gs.sse(
            gs.chunk({"text": TEXT}),
            {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
        )
    )


def ollama_stream() -> Reply:
    return Reply.ndjson(
        [
            {"model": "qwen3:8b", "message": {"role": "assistant", "content": TEXT}, "done": False},
            {"error": "an error was encountered while running the model: unexpected EOF"},
        ]
    )


def compat_stream() -> Reply:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": TEXT}, "finish_reason": None}],
    }
    error = {"error": {"message": "Rate limit exceeded", "type": "rate_limit_exceeded", "code": "429"}}
    return Reply.sse(f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(error)}\n\n")


SUCCESS = Reply.json({"never": "used"})  # a retry would take this (and fail to read it)

#: provider -> (model, upstream route, daemon config, environment, the failing stream)
CASES: dict[str, tuple[str, str, Any, dict[str, str], Any]] = {
    "anthropic": (
        "anthropic:claude-sonnet-4-5",
        "/v1/messages",
        lambda url: {"providers": {"anthropic": {"base_url": url}}},
        {"ANTHROPIC_API_KEY": "k"},
        anthropic_stream,
    ),
    "openai": ("openai:gpt-5", "/v1/responses", lambda url: {}, {"OPENAI_API_KEY": "k"}, openai_stream),
    "gemini": (
        "gemini:gemini-2.5-flash",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        lambda url: {},
        {"GEMINI_API_KEY": "k"},
        gemini_stream,
    ),
    "ollama": (
        "ollama:qwen3:8b",
        "/api/chat",
        lambda url: {"providers": {"ollama": {"enabled": True, "base_url": url}}},
        {},
        ollama_stream,
    ),
    "openai_compat": (
        "vllm:my-model",
        "/v1/chat/completions",
        lambda url: {"providers": {"vllm": {"type": "openai_compat", "base_url": url + "/v1"}}},
        {},
        compat_stream,
    ),
}


@pytest.mark.parametrize("provider", sorted(CASES))
async def test_a_whole_response_that_received_output_is_not_sent_again(start_daemon, nursery, provider):
    model, path, config, env, failing = CASES[provider]
    upstream = await FakeUpstream().start(nursery)
    base = upstream.base_url
    env = {
        **env,
        "OPENAI_BASE_URL": base + "/v1",
        "GEMINI_BASE_URL": base,
        "OPENAI_ORG_ID": "",
        "OPENAI_PROJECT_ID": "",
    }
    daemon = await start_daemon(
        {**config(base), "retry": {"max_retries": 3, "base_delay_s": 0.01, "max_delay_s": 0.01, "jitter": 0.0}}, env=env
    )
    upstream.route("POST", path, failing(), SUCCESS)
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(TrunklineError) as caught:
                await client.complete(model, "hi")
    error = caught.value
    assert len(upstream.sent(path)) == 1, f"{provider}: the request was sent {len(upstream.sent(path))} times"
    assert error.partial is not None and error.partial.text == TEXT
    if error.retryable:
        assert "would bill again" in str(error)


async def test_the_mock_keeps_the_rule_too(daemon):
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(TrunklineError) as caught:
                await client.complete(
                    "mock:echo",
                    "hi",
                    provider_options=steps(
                        {"text": TEXT},
                        {"error": {"error_class": "rate_limit", "status": 529, "attempts": 1}},
                        {"text": "again"},
                    ),
                )
    assert caught.value.partial.text == TEXT and "would bill again" in str(caught.value)
