"""anthropic-version per provider instance: 2023-06-01 unless the instance's options name
2026-10-21, whose rules then apply (sampling parameters left out with a warning; a
document in an assistant turn or citations on a user's text refused before any call)."""

from __future__ import annotations

import pytest
import trio

from fakes.upstream import FakeUpstream, Reply
from trunkline import Client, Message, Request
from trunkline.config.loader import ConfigError, load_config
from trunkline.errors import InvalidRequestError
from trunkline.protocol.messages import ModelInfo, ProviderPart, TextPart
from trunkline.workers.anthropic.request import build
from trunkline.workers.errors import ProviderError

MODEL = ModelInfo(id="anthropic:claude-sonnet-4-5", provider="anthropic", wire_name="claude-sonnet-4-5")
NEW = {"anthropic_version": "2026-10-21"}
KEY = "fake-anthropic-key-0123456789abcdef"
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "the memo"}}
CITED = {
    "type": "text",
    "text": "As the memo says.",
    "citations": [{"type": "char_location", "cited_text": "memo", "document_index": 0}],
}


def wire(request: Request, instance: dict | None = None):
    return build(request, MODEL, provider="anthropic", stream=False, instance=instance)


def sampled() -> Request:
    return Request(
        model=MODEL.id,
        messages=[Message.user("hi")],
        temperature=0.2,
        top_p=0.9,
        provider_options={"anthropic": {"top_k": 5, "auto_cache": False}},
    )


def test_the_default_version_is_unchanged_and_keeps_sampling():
    built = wire(sampled())
    assert built.headers["anthropic-version"] == "2023-06-01"
    assert (built.body["temperature"], built.body["top_p"], built.body["top_k"]) == (0.2, 0.9, 5)


def test_2026_10_21_leaves_sampling_out_with_a_warning_each():
    built = wire(sampled(), NEW)
    assert built.headers["anthropic-version"] == "2026-10-21"
    assert built.body == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert [(w.code, w.message) for w in built.warnings] == [
        ("sampling_unsupported", f"anthropic-version 2026-10-21 takes no {name}; it was left out")
        for name in ("temperature", "top_p", "top_k")
    ]


def history(*assistant: ProviderPart | TextPart, user_parts=()) -> Request:
    return Request(
        model=MODEL.id,
        messages=[
            Message(role="user", content=[TextPart(text="read this"), *user_parts]),
            Message(role="assistant", content=list(assistant)),
            Message.user("and?"),
        ],
    )


def test_2026_10_21_refuses_a_document_in_an_assistant_turn():
    request = history(TextPart(text="Here:"), ProviderPart(api="anthropic", kind="document", data=DOCUMENT))
    assert wire(request).body["messages"][1]["content"][1] == DOCUMENT  # the older version takes it
    with pytest.raises(ProviderError) as caught:
        wire(request, NEW)
    assert caught.value.error_class == "invalid_request"
    assert "messages[1].content[1]" in caught.value.message and "document in an assistant turn" in caught.value.message


def test_2026_10_21_refuses_citations_on_a_users_text():
    cited_user = history(TextPart(text="ok"), user_parts=[ProviderPart(api="anthropic", kind="text", data=CITED)])
    with pytest.raises(ProviderError, match=r"messages\[0\].content\[1\]: .* citations on a user's text"):
        wire(cited_user, NEW)
    # an assistant's own cited text is not the user's: it goes
    assert wire(history(ProviderPart(api="anthropic", kind="text", data=CITED)), NEW).body["messages"][1][
        "content"
    ] == [CITED]


def test_the_config_takes_only_versions_the_worker_speaks(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("providers:\n  anthropic:\n    options: {anthropic_version: '2026-10-21'}\n")
    assert load_config(path).providers["anthropic"].options["anthropic_version"] == "2026-10-21"
    path.write_text("providers:\n  anthropic:\n    options: {anthropic_version: '2024-01-01'}\n")
    with pytest.raises(ConfigError, match=r"`providers.anthropic.options.anthropic_version`: '2024-01-01' is not"):
        load_config(path)


# -- through the real daemon ------------------------------------------------------------


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    config = {"providers": {"anthropic": {"base_url": upstream.base_url, "options": NEW}}}
    return await start_daemon(config, env={"ANTHROPIC_API_KEY": KEY})


ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Hello."}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 5, "output_tokens": 2},
}


@pytest.mark.e2e
async def test_an_instance_on_2026_10_21_sends_that_version_without_sampling(daemon, upstream):
    upstream.route("POST", "/v1/messages", Reply.json(ANSWER))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(
                "anthropic:claude-sonnet-4-5", "hi", temperature=0.2, provider_options={"anthropic": {"top_k": 5}}
            )
    assert response.text == "Hello."
    (sent,) = upstream.sent("/v1/messages")
    assert sent.headers["anthropic-version"] == "2026-10-21"
    assert not {"temperature", "top_p", "top_k"} & set(sent.json())
    assert sorted(w.message for w in response.warnings if w.code == "sampling_unsupported") == [
        "anthropic-version 2026-10-21 takes no temperature; it was left out",
        "anthropic-version 2026-10-21 takes no top_k; it was left out",
    ]


@pytest.mark.e2e
async def test_a_document_in_an_assistant_turn_is_refused_without_a_call(daemon, upstream):
    upstream.route("POST", "/v1/messages", Reply.json(ANSWER))
    request = history(TextPart(text="Here:"), ProviderPart(api="anthropic", kind="document", data=DOCUMENT))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(InvalidRequestError, match="document in an assistant turn"):
                await client.complete(request)
    assert upstream.requests == []
