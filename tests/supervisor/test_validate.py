"""Request validation before any provider call (OpenArmature conformance 003 and more)."""

from __future__ import annotations

import re

import pytest

from trunkline.protocol.messages import (
    DocumentPart,
    ImagePart,
    Message,
    ModelInfo,
    ModelRules,
    Request,
    ResponseFormat,
    TextPart,
    Timeouts,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from trunkline.supervisor.validate import Invalid, validate

FULL = ModelInfo(
    id="mock:echo",
    provider="mock",
    wire_name="echo",
    tools=True,
    vision=True,
    structured_output=True,
    context_window=1000,
    max_output=100,
)
BASIC = ModelInfo(
    id="mock:basic",
    provider="mock",
    wire_name="basic",
    tools=False,
    vision=False,
    structured_output=False,
    streaming=False,
)
CALL = ToolCallPart(id="call_abc123_with_underscores", name="lookup", arguments={"q": 1})


def req(*messages: Message, **fields) -> Request:
    return Request(model="mock:echo", messages=list(messages), **fields)


VALID = [
    req(Message.user("hi")),
    req(Message.system("sys"), Message.developer("dev"), Message.user("hi")),
    req(Message.user("hi"), Message(role="assistant", content=[CALL]), Message.tool_result(CALL.id, "ok")),
    req(
        Message.user("hi"),
        Message(role="assistant", content=[CALL]),
        Message(role="tool", tool_call_id=CALL.id, content=[TextPart(text="ok")]),
    ),
    # Hyphens and a leading underscore are legal on every provider (issue 12: `get-weather` was refused).
    req(Message.user("hi"), tools=[Tool(name="get-weather"), Tool(name="_private"), Tool(name="a" * 64)]),
    req(
        Message.user("hi"),
        Message.assistant("yes"),
        Message.user("and?"),
        tools=[Tool(name="a_b9")],
        tool_choice=ToolChoice(mode="tool", name="a_b9"),
    ),
]


@pytest.mark.parametrize("request_", VALID)
def test_valid_requests_pass(request_):
    validate(request_, FULL, stream=True)


INVALID = [
    (
        "system in the middle",
        req(Message.user("hi"), Message.system("late"), Message.user("x")),
        "may only come before",
    ),
    ("tool without a call", req(Message.user("hi"), Message.tool_result("call_x", "r")), "does not answer"),
    (
        "tool answers a later call",
        req(
            Message.user("hi"),
            Message.tool_result(CALL.id, "r"),
            Message(role="assistant", content=[CALL]),
            Message.user("x"),
        ),
        "does not answer",
    ),
    ("duplicate tools", req(Message.user("hi"), tools=[Tool(name="a"), Tool(name="a")]), "duplicate tool name"),
    ("empty user", req(Message.user("")), "non-empty"),
    ("empty system", req(Message.system(""), Message.user("x")), "non-empty text"),
    ("empty assistant", req(Message.user("x"), Message.assistant(""), Message.user("y")), "non-empty"),
    ("no messages", req(), "empty"),
    ("only system", req(Message.system("x")), "only system"),
    ("starts with assistant", req(Message.assistant("x"), Message.user("y")), "start with a user"),
    ("ends with assistant", req(Message.user("x"), Message.assistant("y")), "last message"),
    ("tool name with a dot", req(Message.user("x"), tools=[Tool(name="read.file")]), "must match"),
    ("tool name with a space", req(Message.user("x"), tools=[Tool(name="read file")]), "must match"),
    ("tool name too long", req(Message.user("x"), tools=[Tool(name="a" * 65)]), "must match"),
    ("tool name starts with digit", req(Message.user("x"), tools=[Tool(name="1a")]), "must match"),
    (
        "choice of unknown tool",
        req(Message.user("x"), tools=[Tool(name="a")], tool_choice=ToolChoice(mode="tool", name="b")),
        "not among the tools",
    ),
    ("required without tools", req(Message.user("x"), tool_choice=ToolChoice(mode="required")), "needs at least one"),
    ("tool call in user", req(Message(role="user", content=[CALL])), "cannot hold tool_call"),
    ("image without source", req(Message.user("x", ImagePart())), "an image needs a url or base64 data"),
    ("data without media type", req(Message.user("x", ImagePart(data="aGk="))), "needs a media_type"),
    (
        "duplicate call ids",
        req(Message.user("x"), Message(role="assistant", content=[CALL, CALL]), Message.tool_result(CALL.id, "r")),
        "used twice",
    ),
    ("temperature", req(Message.user("x"), temperature=3.0), "outside [0, 2]"),
    ("max_tokens", req(Message.user("x"), max_tokens=0), "max_tokens 0 is outside [1, 2147483647]"),
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
        validate(
            req(Message.user("x"), response_format=ResponseFormat(kind="json_schema", schema={"type": "object"})),
            BASIC,
            stream=False,
        )
    with pytest.raises(Invalid, match="does not support streaming"):
        validate(req(Message.user("x")), BASIC, stream=True)


def test_prompt_far_over_the_context_window_is_context_length():
    with pytest.raises(Invalid, match="over the 1000-token context") as info:
        validate(req(Message.user("word " * 3000)), FULL, stream=True)
    assert info.value.error_class == "context_length"


def test_models_outside_the_catalog_skip_capability_checks():
    unknown = ModelInfo(id="mock:new", provider="mock", wire_name="new", tools=False, in_catalog=False)
    validate(req(Message.user("x"), tools=[Tool(name="a")]), unknown, stream=True)


# -- per-model rules: what a model cannot serve at all is refused before any call ------------

OPUS_55 = ModelInfo(
    id="anthropic:claude-opus-5-5",
    provider="anthropic",
    wire_name="claude-opus-5-5",
    tools=True,
    reasoning=True,
    thinking="adaptive",
    rules=ModelRules(
        sampling=[],
        efforts=["low", "medium", "high", "xhigh", "max"],
        thinking_always_on=True,
        forced_tool_with_thinking=False,
    ),
)
SONNET_45 = ModelInfo(
    id="anthropic:claude-sonnet-4-5",
    provider="anthropic",
    wire_name="claude-sonnet-4-5",
    tools=True,
    reasoning=True,
    thinking="budget",
    rules=ModelRules(forced_tool_with_thinking=False),
)


def test_an_effort_the_model_lacks_is_refused_naming_what_it_takes():
    request = req(Message.user("hi"), reasoning_effort="none")
    with pytest.raises(Invalid) as info:
        validate(request, OPUS_55, stream=True)
    assert info.value.error_class == "invalid_request"
    assert info.value.message == (
        "reasoning_effort 'none' is not available on anthropic:claude-opus-5-5, which "
        "takes low, medium, high, xhigh, max (rule `efforts`)"
    )
    validate(req(Message.user("hi"), reasoning_effort="xhigh"), OPUS_55, stream=True)


@pytest.mark.parametrize("choice", [ToolChoice(mode="required"), ToolChoice(mode="tool", name="f")])
def test_forced_tool_with_always_on_thinking_is_refused(choice):
    request = req(Message.user("hi"), tools=[Tool(name="f")], tool_choice=choice)
    with pytest.raises(Invalid, match=r"forces a tool, which anthropic:claude-opus-5-5 refuses while it reasons"):
        validate(request, OPUS_55, stream=True)
    # Where thinking can be turned off, the translator does that instead: no refusal.
    validate(request, SONNET_45, stream=True)
    validate(req(Message.user("hi"), tools=[Tool(name="f")], tool_choice=ToolChoice(mode="auto")), OPUS_55, True)


def test_prompt_over_the_input_limit_is_context_length_even_inside_the_window():
    model = ModelInfo(
        id="openai:gpt-6-sol",
        provider="openai",
        wire_name="gpt-6-sol",
        context_window=1000,
        rules=ModelRules(max_input_tokens=100),
    )
    with pytest.raises(Invalid, match="over the 100-token input limit of openai:gpt-6-sol") as info:
        validate(req(Message.user("word " * 400)), model, stream=True)
    assert info.value.error_class == "context_length"


# -- numbers, provider options, media (issue 11) ------------------------------------------

NAN, INF = float("nan"), float("inf")
PNG = "iVBORw0KGgo="  # the PNG signature, base64


def one(**fields) -> Request:
    return req(Message.user("x"), **fields)


def mock(**options) -> dict:
    return {"mock": options}


BAD_NUMBERS = [
    ("request_s negative", one(timeouts=Timeouts(request_s=-1)), "timeouts.request_s -1"),
    ("request_s nan", one(timeouts=Timeouts(request_s=NAN)), "timeouts.request_s must be a finite number"),
    ("stream_idle_s nan", one(timeouts=Timeouts(stream_idle_s=NAN)), "timeouts.stream_idle_s must be a finite"),
    ("connect_s zero", one(timeouts=Timeouts(connect_s=0)), "timeouts.connect_s 0 is outside (0, 86400]"),
    ("request_s a year", one(timeouts=Timeouts(request_s=3e7)), "timeouts.request_s"),
    ("temperature nan", one(temperature=NAN), "temperature must be a finite number"),
    ("temperature inf", one(temperature=INF), "temperature must be a finite number"),
    ("top_p zero", one(top_p=0.0), "top_p 0.0 is outside (0, 1]"),
    ("max_tokens huge", one(max_tokens=2**40), "max_tokens"),
    ("seed over int64", one(seed=2**63), "seed"),
    ("max_retries", one(max_retries=11), "max_retries 11"),
    (
        "nan in provider options",
        one(provider_options={"openrouter": {"x": [1.0, NAN]}}),
        "provider_options.openrouter.x[1]: nan is not a finite number",
    ),
    (
        "inf in a tool schema",
        req(Message.user("x"), tools=[Tool(name="t", parameters={"type": "object", "maximum": INF})]),
        "tools[0].parameters.maximum: inf is not a finite number",
    ),
    (
        "mock delay negative",
        one(provider_options=mock(delay=-1)),
        "provider_options.mock.delay is -1: expected `float` >= 0.0",
    ),
    (
        "mock step delay nan",
        one(provider_options=mock(steps=[{"text": "a", "delay": NAN}])),
        "provider_options.mock.steps[0].delay: nan is not a finite number",
    ),
    (
        "mock step delay a string",
        one(provider_options=mock(steps=[{"text": "a", "delay": "soon"}])),
        "provider_options.mock.steps[0].delay is 'soon': expected `float | null`, got `str`",
    ),
    (
        "mock chunks zero",
        one(provider_options=mock(steps=[{"tool_call": {"name": "t", "chunks": 0}}])),
        "provider_options.mock.steps[0].tool_call.chunks is 0: expected `int` >= 1",
    ),
    (
        "mock repeat float",
        one(provider_options=mock(steps=[{"text": "a"}], repeat=2.5)),
        "provider_options.mock.repeat is 2.5: expected `int`, got `float`",
    ),
    (
        "mock script too long",
        one(provider_options=mock(steps=[{"text": "a"}] * 10, repeat=200_000)),
        "over the 1000000 steps",
    ),
    (
        "mock usage negative",
        one(provider_options=mock(steps=[{"usage": {"input_tokens": -5}}])),
        "provider_options.mock.steps[0].usage.input_tokens is -5: expected `int` >= 0",
    ),
]


@pytest.mark.parametrize(("name", "request_", "words"), BAD_NUMBERS, ids=[c[0] for c in BAD_NUMBERS])
def test_every_number_is_checked_for_type_finiteness_and_range(name, request_, words):
    with pytest.raises(Invalid, match=re.escape(words)) as info:
        validate(request_, FULL, stream=True, provider_type="mock")
    assert info.value.error_class == "invalid_request"


def test_provider_options_are_checked_for_the_provider_that_reads_them():
    thinking = one(provider_options={"anthropic": {"thinking": {"type": "enabled", "budget_tokens": 10}}})
    claude = ModelInfo(id="anthropic:x", provider="anthropic", wire_name="x", in_catalog=False)
    with pytest.raises(
        Invalid, match=re.escape("provider_options.anthropic.thinking.budget_tokens is 10: expected `int` >= 1024")
    ):
        validate(thinking, claude, stream=True, provider_type="anthropic")
    validate(thinking, FULL, stream=True, provider_type="mock")  # the mock never reads them
    with pytest.raises(
        Invalid, match=re.escape("provider_options.anthropic.thinking is 'on': expected `object | null`, got `str`")
    ):
        validate(
            one(provider_options={"anthropic": {"thinking": "on"}}), claude, stream=True, provider_type="anthropic"
        )
    local = ModelInfo(id="lab:x", provider="lab", wire_name="x", in_catalog=False)
    by_name = one(provider_options={"lab": {"options": {"top_k": -3}}, "ollama": {"options": {"top_k": 5}}})
    with pytest.raises(Invalid, match=re.escape("provider_options.lab.options.top_k is -3: expected `int` >= 0")):
        validate(by_name, local, stream=True, provider_type="ollama")
    validate(
        one(provider_options=mock(delay=0.01, repeat=3, steps=[{"text": "a", "delay": 0}])),
        FULL,
        stream=True,
        provider_type="mock",
    )


def image(**fields) -> Request:
    return req(Message.user("look", ImagePart(**fields)))


BAD_MEDIA = [
    ("local path", image(path="/etc/passwd"), "the daemon does not read local files"),
    ("path with data", image(path="/proc/self/environ", data=PNG, media_type="image/png"), "does not read local"),
    ("file url", image(url="file:///etc/passwd"), "only https, http and data: URLs"),
    ("ftp url", image(url="ftp://host/x.png"), "only https, http and data: URLs"),
    ("no host", image(url="https:///x.png"), "has no host"),
    ("bad port", image(url="https://host:99999999/x.png"), "malformed URL"),
    ("space in url", image(url="https://host/a b.png"), "may not hold spaces"),
    ("url and data", image(url="https://host/x.png", data=PNG, media_type="image/png"), "not both"),
    ("bad base64", image(data="not base64!", media_type="image/png"), "not valid base64"),
    ("unpadded base64", image(data="iVBORw0KGgo", media_type="image/png"), "not valid base64"),
    ("non-ascii base64", image(data="iVBORw0KGgé=", media_type="image/png"), "not base64"),
    ("image as pdf", image(data=PNG, media_type="application/pdf"), "not an accepted image type"),
    ("svg", image(url="https://host/x.svg", media_type="image/svg+xml"), "not an accepted image type"),
    ("data url not base64", image(url="data:image/png,abc"), "data:<media type>;base64,<data>"),
    ("data url wrong type", image(url=f"data:text/html;base64,{PNG}"), "not an accepted image type"),
    ("data url bad payload", image(url="data:image/png;base64,@@@@"), "not valid base64"),
    (
        "document type",
        req(Message.user("read", DocumentPart(data=PNG, media_type="application/x-sh"))),
        "not an accepted document type",
    ),
    (
        "image in a tool result",
        req(
            Message.user("x"),
            Message(role="assistant", content=[CALL]),
            Message(
                role="tool", content=[ToolResultPart(tool_call_id=CALL.id, content=[ImagePart(path="/etc/shadow")])]
            ),
        ),
        "messages[2].content[0].content[0]: the daemon does not read local files",
    ),
]


@pytest.mark.parametrize(("name", "request_", "words"), BAD_MEDIA, ids=[c[0] for c in BAD_MEDIA])
def test_media_parts_are_checked_before_any_provider_call(name, request_, words):
    with pytest.raises(Invalid, match=re.escape(words)) as info:
        validate(request_, FULL, stream=True, provider_type="mock")
    assert info.value.error_class == "invalid_request"


@pytest.mark.parametrize(
    "part",
    [
        ImagePart(url="https://example.com/cat.png?size=2#x"),
        ImagePart(url="http://127.0.0.1:8080/cat.jpg", media_type="image/jpeg"),
        ImagePart(url=f"data:image/png;base64,{PNG}"),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(data="", url="https://example.com/a.webp"),
        DocumentPart(data="aGVsbG8=", media_type="text/plain", name="a.txt"),
        DocumentPart(url="https://example.com/paper.pdf", media_type="application/pdf"),
    ],
)
def test_well_formed_media_pass(part):
    roomy = ModelInfo(id="mock:echo", provider="mock", wire_name="echo", vision=True, context_window=100_000)
    validate(req(Message.user("look", part)), roomy, stream=True, provider_type="mock")


CLAUDE = ModelInfo(id="anthropic:x", provider="anthropic", wire_name="x", in_catalog=False)


def test_an_unknown_option_is_refused_naming_the_nearest_one_and_extra_body():
    with pytest.raises(Invalid) as info:
        validate(
            one(provider_options={"anthropic": {"beta_features": ["files-api-2025-04-14"]}}),
            CLAUDE,
            stream=True,
            provider_type="anthropic",
        )
    message = info.value.message
    assert "unknown option `beta_features`" in message and "did you mean `beta_headers`?" in message
    assert "provider_options.anthropic.extra_body" in message
    gpt = ModelInfo(id="openai:x", provider="openai", wire_name="x", in_catalog=False)
    with pytest.raises(Invalid, match="unknown option `reasoning_sumary`; did you mean `reasoning_summary`"):
        validate(
            one(provider_options={"openai": {"reasoning_sumary": "auto"}}), gpt, stream=True, provider_type="openai"
        )
    # What the schema does not know goes in extra_body; a server's own extensions are not refused.
    validate(
        one(provider_options={"anthropic": {"extra_body": {"brand_new_field": 1}}}),
        CLAUDE,
        stream=True,
        provider_type="anthropic",
    )
    local = ModelInfo(id="vllm:x", provider="vllm", wire_name="x", in_catalog=False)
    validate(one(provider_options={"vllm": {"my_server_knob": 3}}), local, stream=True, provider_type="openai_compat")


def test_mock_turns_are_checked_as_steps_are():
    with pytest.raises(Invalid, match=re.escape("provider_options.mock.turns[1][0].tool_call.chunks is 0")):
        validate(
            one(provider_options=mock(turns=[[{"text": "a"}], [{"tool_call": {"name": "t", "chunks": 0}}]])),
            FULL,
            stream=True,
            provider_type="mock",
        )
    with pytest.raises(Invalid, match="unknown option `step`; did you mean `steps`"):
        validate(one(provider_options=mock(step=[{"text": "a"}])), FULL, stream=True, provider_type="mock")
    with pytest.raises(
        Invalid, match=re.escape("provider_options.mock.turns[0][0] is dict: object contains unknown field `txt`")
    ):
        validate(one(provider_options=mock(turns=[[{"txt": "a"}]])), FULL, stream=True, provider_type="mock")
