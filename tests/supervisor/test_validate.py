"""Request validation before any provider call (OpenArmature conformance 003 and more)."""

from __future__ import annotations

import re

import pytest

from trunkline.protocol.messages import (
    ImagePart,
    Message,
    ModelInfo,
    Request,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCallPart,
    ToolChoice,
)
from trunkline.supervisor.validate import Invalid, validate

FULL = ModelInfo(id="mock:echo", provider="mock", wire_name="echo", tools=True, vision=True,
                 structured_output=True, context_window=1000, max_output=100)
BASIC = ModelInfo(id="mock:basic", provider="mock", wire_name="basic", tools=False, vision=False,
                  structured_output=False, streaming=False)
CALL = ToolCallPart(id="call_abc123_with_underscores", name="lookup", arguments={"q": 1})


def req(*messages: Message, **fields) -> Request:
    return Request(model="mock:echo", messages=list(messages), **fields)


VALID = [
    req(Message.user("hi")),
    req(Message.system("sys"), Message.developer("dev"), Message.user("hi")),
    req(Message.user("hi"), Message(role="assistant", content=[CALL]), Message.tool_result(CALL.id, "ok")),
    req(Message.user("hi"), Message(role="assistant", content=[CALL]),
        Message(role="tool", tool_call_id=CALL.id, content=[TextPart(text="ok")])),
    req(Message.user("hi"), Message.assistant("yes"), Message.user("and?"), tools=[Tool(name="a_b9")],
        tool_choice=ToolChoice(mode="tool", name="a_b9")),
]


@pytest.mark.parametrize("request_", VALID)
def test_valid_requests_pass(request_):
    validate(request_, FULL, stream=True)


INVALID = [
    ("system in the middle", req(Message.user("hi"), Message.system("late"), Message.user("x")), "may only come before"),
    ("tool without a call", req(Message.user("hi"), Message.tool_result("call_x", "r")), "does not answer"),
    ("tool answers a later call", req(Message.user("hi"), Message.tool_result(CALL.id, "r"),
                                      Message(role="assistant", content=[CALL]), Message.user("x")), "does not answer"),
    ("duplicate tools", req(Message.user("hi"), tools=[Tool(name="a"), Tool(name="a")]), "duplicate tool name"),
    ("empty user", req(Message.user("")), "non-empty"),
    ("empty system", req(Message.system(""), Message.user("x")), "non-empty text"),
    ("empty assistant", req(Message.user("x"), Message.assistant(""), Message.user("y")), "non-empty"),
    ("no messages", req(), "empty"),
    ("only system", req(Message.system("x")), "only system"),
    ("starts with assistant", req(Message.assistant("x"), Message.user("y")), "start with a user"),
    ("ends with assistant", req(Message.user("x"), Message.assistant("y")), "last message"),
    ("tool name with dash", req(Message.user("x"), tools=[Tool(name="read-file")]), "must match"),
    ("tool name too long", req(Message.user("x"), tools=[Tool(name="a" * 65)]), "must match"),
    ("tool name starts with digit", req(Message.user("x"), tools=[Tool(name="1a")]), "must match"),
    ("choice of unknown tool", req(Message.user("x"), tools=[Tool(name="a")],
                                   tool_choice=ToolChoice(mode="tool", name="b")), "not among the tools"),
    ("required without tools", req(Message.user("x"), tool_choice=ToolChoice(mode="required")), "needs at least one"),
    ("tool call in user", req(Message(role="user", content=[CALL])), "cannot hold tool_call"),
    ("image without source", req(Message.user("x", ImagePart())), "needs a url, data or path"),
    ("data without media type", req(Message.user("x", ImagePart(data="aGk="))), "needs a media_type"),
    ("duplicate call ids", req(Message.user("x"), Message(role="assistant", content=[CALL, CALL]),
                               Message.tool_result(CALL.id, "r")), "used twice"),
    ("temperature", req(Message.user("x"), temperature=3.0), "outside [0, 2]"),
    ("max_tokens", req(Message.user("x"), max_tokens=0), "at least 1"),
    ("schema missing", req(Message.user("x"), response_format=ResponseFormat(kind="json_schema")), "needs a schema"),
    ("empty stop", req(Message.user("x"), stop_sequences=[""]), "empty string"),
    ("over max output", req(Message.user("x"), max_tokens=101), "exceeds the 100 output tokens"),
]


@pytest.mark.parametrize(("name", "request_", "words"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_requests_are_refused_with_a_clear_reason(name, request_, words):
    with pytest.raises(Invalid, match=re.escape(words)) as info:
        validate(request_, FULL, stream=True)
    assert info.value.error_class == "invalid_request"


def test_capability_mismatches():
    with pytest.raises(Invalid, match="does not support tools"):
        validate(req(Message.user("x"), tools=[Tool(name="a")]), BASIC, stream=False)
    with pytest.raises(Invalid, match="does not accept images"):
        validate(req(Message.user("x", ImagePart(url="https://x/y.png"))), BASIC, stream=False)
    with pytest.raises(Invalid, match="structured output"):
        validate(req(Message.user("x"), response_format=ResponseFormat(kind="json_schema", schema={"type": "object"})),
                 BASIC,
                 stream=False)
    with pytest.raises(Invalid, match="does not support streaming"):
        validate(req(Message.user("x")), BASIC, stream=True)


def test_prompt_far_over_the_context_window_is_context_length():
    with pytest.raises(Invalid, match="over the 1000-token context") as info:
        validate(req(Message.user("word " * 3000)), FULL, stream=True)
    assert info.value.error_class == "context_length"


def test_models_outside_the_catalog_skip_capability_checks():
    unknown = ModelInfo(id="mock:new", provider="mock", wire_name="new", tools=False, in_catalog=False)
    validate(req(Message.user("x"), tools=[Tool(name="a")]), unknown, stream=True)
