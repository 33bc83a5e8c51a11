"""Stop sequences over Chat Completions: OpenAI's own hosts take at most 4 (more is a 400
for the whole request), so the first 4 are sent with a warning; other servers take what
they are given, unless the instance's `max_stop_sequences` says otherwise. Through the
real daemon, against fake servers on 127.0.0.1 (OpenAI's host reached through an HTTP
proxy that is the fake itself)."""

from __future__ import annotations

import pytest
import trio

from fakes import chat_completions as cc
from fakes.upstream import FakeUpstream, Reply
from trunkline import Client
from trunkline.workers.openai_compat.adapter import instance_options

pytestmark = pytest.mark.e2e

STOPS = ["\n\n", "END", "###", "Q:", "A:", "--"]
ANSWER = Reply.sse(cc.sse(cc.chunks(id="c1", model="m", text="ok", usage={"prompt_tokens": 5, "completion_tokens": 1})))


async def ask(daemon, model: str) -> object:
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            return await client.complete(model, "hi", stop_sequences=STOPS)


async def test_openai_itself_is_sent_the_first_four(start_daemon, nursery):
    proxy = await FakeUpstream().start(nursery)
    proxy.route("POST", "http://api.openai.com/v1/chat/completions", ANSWER)
    daemon = await start_daemon(
        {"providers": {"oai_chat": {"type": "openai_compat", "base_url": "http://api.openai.com/v1"}}},
        env={"HTTP_PROXY": proxy.base_url, "http_proxy": proxy.base_url, "NO_PROXY": "", "no_proxy": ""},
    )
    response = await ask(daemon, "oai_chat:gpt-4.1-mini")
    assert response.text == "ok"
    (sent,) = proxy.requests
    assert sent.headers["host"] == "api.openai.com" and sent.json()["stop"] == STOPS[:4]
    (warning,) = [w for w in response.warnings if w.code == "unsupported_setting"]
    assert "at most 4 stop sequences" in warning.message


@pytest.mark.parametrize(("options", "sent"), [({}, STOPS), ({"max_stop_sequences": 2}, STOPS[:2])])
async def test_other_servers_take_what_they_are_given_or_what_the_instance_says(start_daemon, nursery, options, sent):
    upstream = await FakeUpstream().start(nursery)
    upstream.route("POST", "/v1/chat/completions", ANSWER)
    daemon = await start_daemon(
        {"providers": {"vllm": {"type": "openai_compat", "base_url": upstream.base_url + "/v1", "options": options}}}
    )
    response = await ask(daemon, "vllm:my-model")
    assert upstream.sent("/v1/chat/completions")[0].json()["stop"] == sent
    assert ("unsupported_setting" in {w.code for w in response.warnings}) == (sent != STOPS)


def test_which_hosts_are_openai():
    assert instance_options("https://api.openai.com/v1", {}) == {"max_stop_sequences": 4}
    assert instance_options("https://my-team.openai.azure.com/openai/v1", {}) == {"max_stop_sequences": 4}
    assert instance_options("https://api.openai.com/v1", {"max_stop_sequences": 8}) == {"max_stop_sequences": 8}
    for other in ("https://openrouter.ai/api/v1", "http://127.0.0.1:8000/v1", "https://api.openai.com.evil.example"):
        assert instance_options(other, {}) == {}
