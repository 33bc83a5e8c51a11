"""A server that refuses `max_completion_tokens` (older vLLM and TGI, servers that refuse
fields they do not know) gets `max_tokens` on the same attempt, and its worker remembers
that: one refused call per provider instance, not per request. Through the real daemon,
against fake servers on 127.0.0.1."""

from __future__ import annotations

import pytest
import trio

from fakes import chat_completions as cc
from fakes.upstream import FakeUpstream, Recorded, Reply
from trunkline import Client
from trunkline.errors import InvalidRequestError, ServerError

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
USAGE = {"prompt_tokens": 40, "completion_tokens": 6, "total_tokens": 46}
#: OpenAI's words for a parameter a model does not take, as its API sends them, for the other field.
OPENAI_STYLE = (
    "Unsupported parameter: 'max_completion_tokens' is not supported with this model. Use 'max_tokens' instead."
)
#: A pydantic-validated server's refusal of a field it does not know (a 422).
PYDANTIC_STYLE = {
    "detail": [
        {
            "type": "extra_forbidden",
            "loc": ["body", "max_completion_tokens"],
            "msg": "Extra inputs are not permitted",
            "input": 64,
        }
    ]
}


def answer(text: str) -> Reply:
    return Reply.sse(cc.sse(cc.chunks(id="c1", model="old-model", text=text, usage=USAGE)))


def refusing(refusal: Reply) -> object:
    """A server that knows only `max_tokens`."""

    def reply(request: Recorded) -> Reply:
        return refusal if "max_completion_tokens" in request.json() else answer("Hello.")

    return reply


def provider(upstream: FakeUpstream) -> dict:
    return {"type": "openai_compat", "base_url": upstream.base_url + "/v1"}


@pytest.mark.parametrize(
    "refusal",
    [
        cc.error(400, OPENAI_STYLE, "invalid_request_error", "unsupported_parameter", "max_completion_tokens"),
        Reply.json(PYDANTIC_STYLE, status=422),
    ],
    ids=["openai-style-400", "pydantic-style-422"],
)
async def test_one_refused_call_per_instance(start_daemon, nursery, refusal):
    old = await FakeUpstream().start(nursery)
    new = await FakeUpstream().start(nursery)
    old.route("POST", CHAT, refusing(refusal))
    new.route("POST", CHAT, answer("Hi."))
    daemon = await start_daemon({"providers": {"old": provider(old), "new": provider(new)}})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            first = await client.complete("old:old-model", "hi", max_tokens=64)
            second = await client.complete("old:old-model", "hi again", max_tokens=64)
            elsewhere = await client.complete("new:new-model", "hi", max_tokens=64)
    assert first.text == second.text == "Hello." and elsewhere.text == "Hi."
    sent = [r.json() for r in old.sent(CHAT)]
    # the first request: refused once, then sent with max_tokens; the second: max_tokens at once
    assert [("max_completion_tokens" in b, b.get("max_tokens")) for b in sent] == [
        (True, None),
        (False, 64),
        (False, 64),
    ]
    assert [b["messages"][-1]["content"] for b in sent] == ["hi", "hi", "hi again"]
    # the refused call produced nothing: the response is the one answer, billed once
    assert (first.usage.input_tokens, first.usage.output_tokens) == (40, 6)
    assert "unsupported_setting" in {w.code for w in first.warnings}
    assert "unsupported_setting" not in {w.code for w in second.warnings}
    # another instance of the same type is not affected
    assert new.sent(CHAT)[0].json()["max_completion_tokens"] == 64


async def test_streams_are_sent_again_too(start_daemon, nursery):
    old = await FakeUpstream().start(nursery)
    old.route(
        "POST",
        CHAT,
        refusing(
            cc.error(400, OPENAI_STYLE, "invalid_request_error", "unsupported_parameter", "max_completion_tokens")
        ),
    )
    daemon = await start_daemon({"providers": {"old": provider(old)}})
    with trio.fail_after(30):
        async with (
            Client(daemon.runtime_dir) as client,
            client.stream("old:old-model", "hi", max_tokens=64) as stream,
        ):
            events = [e async for e in stream]
    assert events[-1].response.text == "Hello."
    assert [("max_completion_tokens" in r.json()) for r in old.sent(CHAT)] == [True, False]


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("max_completion_tokens is too large: 900000. This model supports at most 32768 completion tokens.", None),
        ("Unsupported value: 'max_completion_tokens' must be at most 32768 with this model.", "unsupported_value"),
    ],
)
async def test_a_bad_value_is_not_a_refused_field(start_daemon, nursery, message, code):
    """A refusal of the value (too many tokens) is the caller's to fix: not sent again."""
    upstream = await FakeUpstream().start(nursery)
    upstream.route("POST", CHAT, cc.error(400, message, "invalid_request_error", code))
    daemon = await start_daemon({"providers": {"srv": provider(upstream)}})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(InvalidRequestError, match="max_completion_tokens"):
                await client.complete("srv:m", "hi", max_tokens=900000)
    assert len(upstream.sent(CHAT)) == 1


async def test_no_second_call_after_output(start_daemon, nursery):
    """An error that comes after the server began to answer is not a refusal of the
    request: the answer may be billed, and it is not asked for again."""
    upstream = await FakeUpstream().start(nursery)
    partial = cc.chunks(id="c1", model="m", text="Hello")[:-1]  # no finish: the error cuts it
    error = {"error": {"message": OPENAI_STYLE, "type": "invalid_request_error", "code": "unsupported_parameter"}}
    upstream.route("POST", CHAT, Reply.sse(cc.sse([*partial, error])))
    daemon = await start_daemon({"providers": {"srv": provider(upstream)}})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(ServerError, match="already sent part of its answer"):
                await client.complete("srv:m", "hi", max_tokens=64)
    assert len(upstream.sent(CHAT)) == 1
