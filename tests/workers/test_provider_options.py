"""provider_options as the workers read them, end to end: a provider instance named other
than its type finds the options given under its type, for its body and for its price."""

from __future__ import annotations

import json

import pytest
import trio

from fakes.upstream import FakeUpstream, Reply
from trunkline import Client

pytestmark = pytest.mark.e2e

MODEL = "claude-eu:tiered"
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-tiered",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1000, "output_tokens": 100},
}


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    return await start_daemon(
        {
            "providers": {
                "claude-eu": {"type": "anthropic", "base_url": upstream.base_url, "api_key_env": "CLAUDE_EU_KEY"}
            },
            "models": {
                MODEL: {
                    "wire_name": "claude-tiered",
                    "price": {"input": 2.0, "output": 10.0, "service_tiers": {"batch": 0.5}},
                }
            },
        },
        env={"CLAUDE_EU_KEY": "fake-claude-eu-key-0123456789"},
    )


async def test_options_under_the_type_set_the_body_and_the_price_of_an_instance_of_another_name(daemon, upstream):
    reply = Reply(200, {"content-type": "application/json"}, [json.dumps(MESSAGE).encode()])
    upstream.route("POST", "/v1/messages", reply, reply, reply)
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            plain = await client.complete(MODEL, "hi")
            by_type = await client.complete(MODEL, "hi", provider_options={"anthropic": {"service_tier": "batch"}})
            by_name = await client.complete(MODEL, "hi", provider_options={"claude-eu": {"service_tier": "batch"}})
    assert plain.cost_usd == pytest.approx((1000 * 2.0 + 100 * 10.0) / 1e6)
    # The worker sends the tier it finds under the type, and the price follows what was sent.
    assert by_type.cost_usd == by_name.cost_usd == pytest.approx(plain.cost_usd * 0.5)
    sent = [r.json() for r in upstream.sent("/v1/messages")]
    assert "service_tier" not in sent[0] and sent[1]["service_tier"] == sent[2]["service_tier"] == "batch"
