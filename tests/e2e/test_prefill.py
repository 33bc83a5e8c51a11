"""Assistant prefill (seed 003), through the real daemon and client against a fake
Anthropic upstream: a conversation ending with an assistant message is sent to a
model that takes one, and the answer is the continuation only; Anthropic's rules
for a prefill (not on Claude 4.6 and later, no trailing whitespace, not while
thinking, not with structured output, text only) and providers that take none are
refused before any call.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from fakes.messages_api import anthropic_answer
from fakes.upstream import FakeUpstream
from trunkline import Client
from trunkline.errors import InvalidRequestError
from trunkline.protocol.messages import Message, ResponseFormat, ToolCallPart

pytestmark = pytest.mark.e2e

ASK = Message.user("Name a colour, as JSON.")
CONTINUATION = ' "blue"}'


@pytest.fixture
async def upstream(nursery):
    up = await FakeUpstream().start(nursery)
    up.route("POST", "/v1/messages", anthropic_answer(CONTINUATION))
    return up


@pytest.fixture
async def served(start_daemon, upstream):
    return await start_daemon(
        {"providers": {"anthropic": {"base_url": upstream.base_url}}},
        env={"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k", "OPENAI_BASE_URL": upstream.base_url + "/v1"},
    )


async def test_the_answer_continues_the_prefill(served, upstream):
    with trio.fail_after(30):
        async with Client(served.runtime_dir) as client:
            whole = await client.complete("anthropic:claude-sonnet-4-5", [ASK, Message.assistant('{"colour":')])
            async with client.stream("claude-haiku-4-5", [ASK, Message.assistant('{"colour":')]) as stream:
                streamed = "".join([text async for text in stream.text_stream])
    assert whole.text == CONTINUATION and streamed == CONTINUATION  # the continuation only
    sent = [r.json() for r in upstream.sent("/v1/messages")]
    assert len(sent) == 2
    for body in sent:
        assert body["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": '{"colour":'}]}


async def refusal(client: Client, model: str, *last: Message, **fields: Any) -> str:
    with pytest.raises(InvalidRequestError) as caught:
        await client.complete(model, [ASK, *last], **fields)
    return caught.value.message


async def test_what_anthropic_refuses_in_a_prefill_is_refused_before_any_call(served, upstream):
    prefill = Message.assistant('{"colour":')
    schema = ResponseFormat(kind="json_schema", schema={"type": "object"})
    call = Message(role="assistant", content=[ToolCallPart(id="t1", name="lookup", arguments={})])
    with trio.fail_after(30):
        async with Client(served.runtime_dir) as client:
            newer = await refusal(client, "anthropic:claude-opus-4-6", prefill)
            spaced = await refusal(client, "anthropic:claude-sonnet-4-5", Message.assistant("The colour is "))
            thinking = await refusal(client, "anthropic:claude-sonnet-4-5", prefill, reasoning_effort="high")
            told_to = await refusal(
                client,
                "anthropic:claude-sonnet-4-5",
                prefill,
                provider_options={"anthropic": {"thinking": {"type": "enabled", "budget_tokens": 2048}}},
            )
            structured = await refusal(client, "anthropic:claude-sonnet-4-5", prefill, response_format=schema)
            tool_call = await refusal(client, "anthropic:claude-sonnet-4-5", call)
            mock = await refusal(client, "mock:echo", prefill)
            openai = await refusal(client, "openai:gpt-5.2", prefill)
    assert "messages[1]: the last message must be from the user or a tool" in newer
    assert "anthropic:claude-opus-4-6 does not take a prefill" in newer and "prefill-removal" in newer
    assert "may not end with whitespace" in spaced
    assert "cannot be used while anthropic:claude-sonnet-4-5 thinks" in thinking
    assert "cannot be used while" in told_to
    assert "structured output" in structured
    assert "holds only text, not tool_call parts" in tool_call
    for other in (mock, openai):
        assert "the last message must be from the user or a tool" in other
        assert "taken only by anthropic models" in other
    assert not upstream.sent("/v1/messages") and not upstream.sent("/v1/responses")
