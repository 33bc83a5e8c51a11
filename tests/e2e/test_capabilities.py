"""Capabilities before the call (seed 000 §3.4, §4.4), through the real daemon and client.

A request that asks a model for what it cannot take (audio to Anthropic, documents
to a Chat Completions server, images to a text-only model, tools to a model
without them) is refused by the supervisor with the capability and the model
named, one WARN line in the daemon's log, and no call upstream: the fake
upstreams count zero requests. What the model can take still goes. `ModelInfo`
carries the capabilities, and `get_model_info` resolves every name a submit
routes, to the same entry.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import trio

from fakes.messages_api import anthropic_answer, compat_answer
from fakes.upstream import FakeUpstream
from trunkline import Client
from trunkline.errors import InvalidRequestError, NotFoundError
from trunkline.protocol.messages import AudioPart, DocumentPart, ImagePart, Message, Request, Tool

pytestmark = pytest.mark.e2e

WAV = base64.b64encode(b"RIFF\x24\x00\x00\x00WAVEfmt ").decode()
PDF = base64.b64encode(b"%PDF-1.4\n%%EOF\n").decode()
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()


@pytest.fixture
async def upstream(nursery):
    up = await FakeUpstream().start(nursery)
    up.route("POST", "/v1/messages", anthropic_answer("heard"))
    up.route("POST", "/v1/chat/completions", compat_answer("read"))
    return up


@pytest.fixture
async def served(start_daemon, upstream):
    """A daemon whose Anthropic, OpenAI, Gemini and one Chat Completions server are the fake upstream."""
    base = upstream.base_url
    return await start_daemon(
        {
            "providers": {
                "anthropic": {"base_url": base},
                "vllm": {"type": "openai_compat", "base_url": base + "/v1"},
            }
        },
        env={
            "ANTHROPIC_API_KEY": "k",
            "OPENAI_API_KEY": "k",
            "GEMINI_API_KEY": "k",
            "OPENAI_BASE_URL": base + "/v1",
            "GEMINI_BASE_URL": base,
            "OPENAI_ORG_ID": "",
            "OPENAI_PROJECT_ID": "",
        },
    )


async def refused(client: Client, model: str, *messages: Message, **fields: Any) -> str:
    with pytest.raises(InvalidRequestError) as caught:
        await client.complete(model, list(messages), **fields)
    return caught.value.message


async def test_what_a_model_cannot_take_is_refused_before_any_call(served, upstream):
    audio = Message.user("what is said here?", AudioPart(data=WAV, media_type="audio/wav"))
    document = Message.user("summarise", DocumentPart(data=PDF, media_type="application/pdf"))
    with trio.fail_after(30):
        async with Client(served.runtime_dir) as client:
            to_claude = await refused(client, "anthropic:claude-sonnet-4-5", audio)
            # A name the catalog does not list is bounded by the implementation too.
            to_new_claude = await refused(client, "anthropic:claude-next-7", audio)
            to_compat = await refused(client, "vllm:my-model", document)
            to_responses = await refused(client, "openai:gpt-5.2", audio)
            image_to_text_model = await refused(
                client, "mock:basic", Message.user("look", ImagePart(data=PNG, media_type="image/png"))
            )
            tools_to_text_model = await refused(client, "mock:basic", Message.user("x"), tools=[Tool(name="lookup")])
            line = await served.wait_for_line("before any call")
    assert "messages[0].content[1]: model anthropic:claude-sonnet-4-5 does not accept audio input" in to_claude
    assert "(capability `audio`)" in to_claude and "nothing was sent" in to_claude
    assert "model anthropic:claude-next-7 does not accept audio input" in to_new_claude
    assert "model vllm:my-model does not accept documents (capability `documents`)" in to_compat
    assert "model openai:gpt-5.2 does not accept audio input" in to_responses
    assert "model mock:basic does not accept images" in image_to_text_model
    assert "model mock:basic does not support tools (capability `tools`)" in tools_to_text_model
    assert not upstream.sent("/v1/messages") and not upstream.sent("/v1/chat/completions")
    assert not upstream.sent("/v1/responses")
    assert "WARNING" in line and "does not accept audio input" in line


async def test_what_a_model_can_take_still_goes(served, upstream):
    with trio.fail_after(30):
        async with Client(served.runtime_dir) as client:
            seen = await client.complete(
                "anthropic:claude-sonnet-4-5",
                Message.user("and this?", DocumentPart(data=PDF, media_type="application/pdf")),
            )
            looked = await client.complete(
                "vllm:my-model", Message.user("and this?", ImagePart(data=PNG, media_type="image/png"))
            )
    assert seen.text == "heard" and looked.text == "read"
    assert len(upstream.sent("/v1/messages")) == 1 and len(upstream.sent("/v1/chat/completions")) == 1
    assert upstream.sent("/v1/messages")[0].json()["messages"][0]["content"][1]["type"] == "document"


async def test_model_info_gives_the_capabilities(served):
    with trio.fail_after(30):
        async with Client(served.runtime_dir) as client:
            sonnet = await client.get_model_info("anthropic:claude-sonnet-4-5")
            opus = await client.get_model_info("claude-opus-4-6")
            flash = await client.get_model_info("gemini:gemini-2.5-flash")
            compat = await client.get_model_info("vllm:my-model")
            basic = await client.get_model_info("mock:basic")
            listed = {m.id: m for m in await client.list_models()}
    assert sonnet and sonnet.capabilities and opus and opus.capabilities and flash and flash.capabilities
    assert compat and compat.capabilities and basic and basic.capabilities
    assert sonnet.capabilities.vision and sonnet.capabilities.documents and not sonnet.capabilities.audio
    assert sonnet.capabilities.prefill and sonnet.capabilities.prompt_caching
    assert not opus.capabilities.prefill  # Anthropic refuses a prefill from Claude 4.6 on
    assert flash.capabilities.audio and not flash.capabilities.prefill
    assert compat.capabilities.vision and not compat.capabilities.documents and not compat.capabilities.audio
    assert not basic.capabilities.tools and not basic.capabilities.vision and not basic.capabilities.audio
    # The catalog's whole list carries them too.
    assert listed["anthropic:claude-sonnet-4-5"].capabilities == sonnet.capabilities


#: Names a submit routes, each with the provider it may be given with.
ROUTED: list[tuple[str, str | None]] = [
    ("gpt-5.2", None),  # a provider's own name, bare
    ("claude-opus-4-6", None),
    ("openai:gpt-5.2", None),
    ("fable", None),  # an alias
    ("claude-haiku-4-5-20251001", None),  # a dated snapshot, served as named
    ("echo", None),
    ("MOCK:echo", None),  # a provider named in another case
    ("anthropic:claude-next-7", None),  # not in the catalog: passed through
    ("claude-sonnet-4-5", "anthropic"),
    ("my-model", "vllm"),
    ("gemini-2.5-flash", None),
]


async def test_model_info_resolves_every_name_a_submit_routes(served):
    with trio.fail_after(60):
        async with Client(served.runtime_dir) as client:
            for name, provider in ROUTED:
                info = await client.get_model_info(name, provider)
                accepted, _ = await client.submit(
                    Request(model=name, provider=provider, messages=[Message.user("hi")]), stream=False
                )
                await client.cancel(accepted.request_id)
                assert info is not None, name
                assert (info.provider, info.id) == (accepted.provider, accepted.model), name
            with pytest.raises(NotFoundError):
                await client.submit(Request(model="claude-nonexistent", messages=[Message.user("hi")]))
            assert await client.get_model_info("claude-nonexistent") is None
