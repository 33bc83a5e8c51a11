"""provider_options end to end: a misspelt option is refused before any provider call,
with the nearest valid name; `extra_body` reaches the provider's body verbatim."""

from __future__ import annotations

import json

import pytest
import trio

from fakes.upstream import FakeUpstream, Reply
from trunkline import Client
from trunkline.errors import InvalidRequestError

pytestmark = pytest.mark.e2e

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    return await start_daemon(
        {"providers": {"anthropic": {"base_url": upstream.base_url}}},
        env={"ANTHROPIC_API_KEY": "fake-anthropic-key-0123456789"},
    )


async def test_a_misspelt_option_is_refused_before_the_call_and_extra_body_goes_through(daemon, upstream):
    upstream.route(
        "POST", "/v1/messages", Reply(200, {"content-type": "application/json"}, [json.dumps(MESSAGE).encode()])
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(InvalidRequestError) as info:
                await client.complete(
                    "anthropic:claude-sonnet-4-5",
                    "hi",
                    provider_options={"anthropic": {"beta_features": ["files-api-2025-04-14"]}},
                )
            with pytest.raises(InvalidRequestError, match=r"provider_options\.mock\.turns\[0\]\[0\]"):
                await client.complete("mock:echo", "hi", provider_options={"mock": {"turns": [[{"txt": "a"}]]}})
            assert upstream.sent("/v1/messages") == []  # refused before any call
            response = await client.complete(
                "anthropic:claude-sonnet-4-5",
                "hi",
                provider_options={
                    "anthropic": {"beta_headers": ["files-api-2025-04-14"], "extra_body": {"brand_new_field": 1}}
                },
            )
    assert "did you mean `beta_headers`?" in str(info.value) and "extra_body" in str(info.value)
    assert response.text == "ok"
    (sent,) = upstream.sent("/v1/messages")
    assert sent.json()["brand_new_field"] == 1 and "beta_features" not in sent.json()
    assert sent.headers["anthropic-beta"] == "files-api-2025-04-14"
