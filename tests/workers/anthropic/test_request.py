"""Canonical request -> Anthropic wire JSON, golden, feature by feature."""

from __future__ import annotations

import base64

import pytest

from trunkline.protocol.messages import (
    AudioPart,
    DocumentPart,
    ImagePart,
    Message,
    ModelInfo,
    RedactedThinkingPart,
    Request,
    ResponseFormat,
    TextPart,
    ThinkingPart,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from trunkline.workers.anthropic.request import build

SONNET = ModelInfo(
    id="anthropic:claude-sonnet-4-5",
    provider="anthropic",
    wire_name="claude-sonnet-4-5",
    max_output=64000,
    reasoning=True,
)
PLAIN = ModelInfo(id="anthropic:x", provider="anthropic", wire_name="x", max_output=None, reasoning=False)
NO_CACHE = {"anthropic": {"auto_cache": False}}


def catalog(model: str) -> ModelInfo:
    from trunkline.config.catalog import Catalog

    return Catalog.load(providers={"anthropic"}).resolve(model)


WEATHER = Tool(
    name="weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def body(*messages: Message, model: ModelInfo = SONNET, wire_ids=None, stream=False, **fields):
    fields.setdefault("provider_options", NO_CACHE)
    built = build(
        Request(model=model.id, messages=list(messages), **fields),
        model,
        provider="anthropic",
        wire_ids=wire_ids or {},
        stream=stream,
    )
    return built


def test_minimal_request():
    built = body(Message.user("Hello"))
    assert built.body == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
    }
    assert built.headers == {"anthropic-version": "2023-06-01"} and built.warnings == []


def test_max_tokens_falls_back_to_the_models_default_then_4096_never_its_maximum():
    assert body(Message.user("x"), max_tokens=100).body["max_tokens"] == 100
    assert body(Message.user("x"), model=PLAIN).body["max_tokens"] == 4096
    # Anthropic counts max_tokens against the output rate limit: the default, not the 64K maximum.
    assert body(Message.user("x"), model=catalog("anthropic:claude-sonnet-4-5")).body["max_tokens"] == 16000


def test_system_and_developer_are_hoisted_and_joined():
    built = body(Message.system("Be brief."), Message.developer("Use metric units."), Message.user("Hi"))
    assert built.body["system"] == "Be brief.\n\nUse metric units."
    assert [m["role"] for m in built.body["messages"]] == ["user"]


def test_consecutive_roles_merge_and_tool_results_go_in_a_user_turn():
    call = ToolCallPart(
        id="tu_01A", name="weather", arguments={"city": "Paris"}, provider_id="toolu_9", provider="anthropic"
    )
    built = body(
        Message.user("one"),
        Message.user("two"),
        Message(role="assistant", content=[TextPart(text="Looking."), call]),
        Message.tool_result("tu_01A", "18°C", is_error=False),
        Message.user("and tomorrow?"),
        wire_ids={"tu_01A": "toolu_9"},
        tools=[WEATHER],
    )
    assert built.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_9", "name": "weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_9", "content": "18°C"},
                {"type": "text", "text": "and tomorrow?"},
            ],
        },
    ]
    assert built.body["tools"] == [
        {"name": "weather", "description": "Weather for a city", "input_schema": WEATHER.parameters}
    ]


def test_a_history_with_tool_calls_and_no_tools_declares_them_and_forbids_calls():
    # Anthropic answers 400 ("tools must be defined") to tool_use/tool_result blocks in a
    # request without tools: the tools the history names are declared, and none may run.
    lookup = ToolCallPart(id="tu_01B", name="lookup", arguments={"q": "x"}, provider_id="toolu_b")
    weather = ToolCallPart(id="tu_01A", name="weather", arguments={"city": "Paris"}, provider_id="toolu_a")
    built = body(
        Message.user("go"),
        Message(role="assistant", content=[weather, lookup]),
        Message.tool_result("tu_01A", "18°C"),
        Message.tool_result("tu_01B", "found"),
        Message(role="assistant", content=[weather]),
        Message.tool_result("tu_01A", "19°C"),
        Message.user("thanks; now summarise"),
        wire_ids={"tu_01A": "toolu_a", "tu_01B": "toolu_b"},
    )
    assert built.body["tools"] == [
        {
            "name": "weather",
            "description": "A tool called earlier in this conversation.",
            "input_schema": {"type": "object"},
        },
        {
            "name": "lookup",
            "description": "A tool called earlier in this conversation.",
            "input_schema": {"type": "object"},
        },
    ]
    assert built.body["tool_choice"] == {"type": "none"}
    assert [w.code for w in built.warnings] == ["tools_from_history"]
    plain = body(Message.user("no tools anywhere"))
    assert "tools" not in plain.body and "tool_choice" not in plain.body and not plain.warnings


def test_error_results_and_rich_result_content():
    built = body(
        Message.user("go"),
        Message(role="assistant", content=[ToolCallPart(id="tu_1", name="shot", arguments={})]),
        Message(
            role="tool",
            content=[
                ToolResultPart(
                    tool_call_id="tu_1",
                    is_error=True,
                    content=[TextPart(text="failed"), ImagePart(data="aGk=", media_type="image/png")],
                )
            ],
        ),
        wire_ids={"tu_1": "tu_1"},
    )
    assert built.body["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "tu_1",
            "is_error": True,
            "content": [
                {"type": "text", "text": "failed"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}},
            ],
        }
    ]


def test_tool_role_with_plain_text_content():
    built = body(
        Message.user("go"),
        Message(role="assistant", content=[ToolCallPart(id="tu_1", name="f")]),
        Message(role="tool", tool_call_id="tu_1", content=[TextPart(text="ok")]),
        wire_ids={"tu_1": "w1"},
    )
    assert built.body["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "w1", "content": "ok"}],
    }


def test_images_and_documents():
    pdf = base64.b64encode(b"%PDF-1.4 test").decode()
    note = base64.b64encode(b"plain words").decode()
    request = Request(
        model="x",
        provider_options=NO_CACHE,
        messages=[
            Message.user(
                "look",
                ImagePart(url="https://example.com/cat.png"),
                ImagePart(data="aGk=", media_type="image/jpeg"),
                DocumentPart(data=pdf, media_type="application/pdf", name="Report"),
                DocumentPart(data=note, media_type="text/plain"),
                DocumentPart(url="https://example.com/x.pdf"),
            )
        ],
    )
    built = build(request, SONNET, provider="anthropic", wire_ids={}, stream=False)
    assert built.body["messages"][0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "aGk="}},
        {
            "type": "document",
            "title": "Report",
            "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain words"}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/x.pdf"}},
    ]


def test_audio_is_dropped_with_a_warning():
    built = body(Message.user("listen", AudioPart(url="https://x/a.wav")))
    assert built.body["messages"][0]["content"] == [{"type": "text", "text": "listen"}]
    assert [w.code for w in built.warnings] == ["unsupported_content"]


def test_thinking_goes_back_verbatim_only_to_anthropic():
    mine = [
        ThinkingPart(text="hmm", signature="EqQBCkgI", provider="anthropic"),
        RedactedThinkingPart(data="EmwKAhgB", provider="anthropic"),
        TextPart(text="answer"),
    ]
    built = body(Message.user("q"), Message(role="assistant", content=mine), Message.user("more"))
    assert built.body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": "EqQBCkgI"},
        {"type": "redacted_thinking", "data": "EmwKAhgB"},
        {"type": "text", "text": "answer"},
    ]
    assert built.warnings == []
    foreign = [
        ThinkingPart(text="hmm", signature="sig", provider="gemini"),
        RedactedThinkingPart(data="x", provider="openai"),
        TextPart(text="answer"),
    ]
    built = body(Message.user("q"), Message(role="assistant", content=foreign), Message.user("more"))
    assert built.body["messages"][1]["content"] == [{"type": "text", "text": "answer"}]
    assert [w.code for w in built.warnings] == ["thinking_dropped"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, None),
        (ToolChoice(mode="auto"), None),
        (ToolChoice(mode="required"), {"type": "any"}),
        (ToolChoice(mode="tool", name="weather"), {"type": "tool", "name": "weather"}),
    ],
)
def test_tool_choice(choice, expected):
    built = body(Message.user("x"), tools=[WEATHER], tool_choice=choice)
    assert built.body.get("tool_choice") == expected and "tools" in built.body


def test_tool_choice_none_is_anthropics_none_and_keeps_the_tools():
    # A history holding tool_use / tool_result needs the tools defined, so they stay.
    call = ToolCallPart(id="tu_1", name="weather", arguments={"city": "Oslo"})
    built = body(
        Message.user("x"),
        Message(role="assistant", content=[call]),
        Message.tool_result("tu_1", "cold"),
        tools=[WEATHER],
        tool_choice=ToolChoice(mode="none"),
        wire_ids={"tu_1": "toolu_1"},
    )
    assert built.body["tool_choice"] == {"type": "none"}
    assert built.body["tools"] == [
        {"name": "weather", "description": "Weather for a city", "input_schema": WEATHER.parameters}
    ]
    assert built.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold"}]},
    ]


def test_sampling_and_stop_sequences():
    built = body(
        Message.user("x"),
        temperature=0.3,
        top_p=0.9,
        stop_sequences=["END", "STOP"],
        seed=4,
        metadata={"user_id": "u-1", "other": "ignored"},
    )
    b = built.body
    assert (b["temperature"], b["top_p"], b["stop_sequences"], b["metadata"]) == (
        0.3,
        0.9,
        ["END", "STOP"],
        {"user_id": "u-1"},
    )
    assert [w.code for w in built.warnings] == ["unsupported_setting"]  # seed


@pytest.mark.parametrize(("effort", "budget"), [("minimal", 1024), ("low", 2048), ("medium", 8192), ("high", 24576)])
def test_reasoning_effort_maps_to_a_thinking_budget(effort, budget):
    built = body(Message.user("x"), reasoning_effort=effort)
    assert built.body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert built.body["max_tokens"] > budget


def test_thinking_budget_fits_under_an_explicit_max_tokens():
    built = body(Message.user("x"), reasoning_effort="high", max_tokens=3000)
    assert built.body["max_tokens"] == 3000 and built.body["thinking"]["budget_tokens"] == 1500
    (lowered,) = built.warnings
    assert lowered.code == "thinking_budget_changed" and "lowered to 1500" in lowered.message
    tiny = body(Message.user("x"), reasoning_effort="high", max_tokens=500)
    assert "thinking" not in tiny.body and tiny.warnings[0].code == "reasoning_unsupported"


@pytest.mark.parametrize(
    ("asked", "max_tokens", "budget", "sent_max", "codes"),
    [
        (30000, None, 30000, 30000 + 4096, []),  # no limit asked: room is made
        (30000, 8000, 4000, 8000, ["reasoning_effort_overridden", "thinking_budget_changed"]),
        (500, 8000, 1024, 8000, ["reasoning_effort_overridden", "thinking_budget_changed"]),
        (2000, 8000, 2000, 8000, ["reasoning_effort_overridden"]),
    ],
)
def test_a_callers_thinking_wins_over_the_effort_and_fits_the_limit(asked, max_tokens, budget, sent_max, codes):
    options = {"anthropic": {"thinking": {"type": "enabled", "budget_tokens": asked}}}
    fields = {"max_tokens": max_tokens} if max_tokens else {}
    built = body(Message.user("x"), reasoning_effort="low" if codes else None, provider_options=options, **fields)
    assert built.body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert built.body["max_tokens"] == sent_max
    assert [w.code for w in built.warnings] == codes
    if codes:
        assert "provider_options.anthropic.thinking" in built.warnings[0].message


def test_thinking_drops_what_it_cannot_be_combined_with():
    built = body(
        Message.user("x"),
        reasoning_effort="low",
        temperature=0.2,
        top_p=0.5,
        tools=[WEATHER],
        tool_choice=ToolChoice(mode="required"),
    )
    assert "temperature" not in built.body and "top_p" not in built.body and "tool_choice" not in built.body
    assert len(built.warnings) == 3


def test_reasoning_on_a_model_without_it_is_a_warning():
    built = body(Message.user("x"), model=PLAIN, reasoning_effort="high")
    assert "thinking" not in built.body and built.warnings[0].code == "reasoning_unsupported"


def test_provider_options_thinking_betas_and_extra_keys():
    built = body(
        Message.user("x"),
        provider_options={
            "anthropic": {
                "auto_cache": False,
                "thinking": {"type": "adaptive"},
                "beta_headers": ["b-1", "b-2"],
                "top_k": 5,
                "service_tier": "auto",
            }
        },
    )
    assert built.body["thinking"] == {"type": "adaptive"}
    assert built.body["top_k"] == 5 and built.body["service_tier"] == "auto"
    assert built.headers["anthropic-beta"] == "b-1,b-2"
    assert "beta_headers" not in built.body and "auto_cache" not in built.body


def test_extra_body_goes_in_verbatim_and_server_tools_are_appended():
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    built = body(
        Message.user("x"),
        tools=[WEATHER],
        provider_options={
            "anthropic": {
                "auto_cache": False,
                "tools": [search],
                "extra_body": {"brand_new_field": {"on": True}, "top_k": 7},
            }
        },
    )
    assert built.body["brand_new_field"] == {"on": True} and built.body["top_k"] == 7
    assert [t["name"] for t in built.body["tools"]] == ["weather", "web_search"]
    assert "extra_body" not in built.body


def test_structured_output_uses_output_config():
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    built = body(Message.user("x"), response_format=ResponseFormat(kind="json_schema", schema=schema, name="out"))
    assert built.body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}


def test_stream_flag():
    assert body(Message.user("x"), stream=True).body["stream"] is True
    assert "stream" not in body(Message.user("x")).body


def test_automatic_cache_breakpoints():
    call = ToolCallPart(id="tu_1", name="weather", arguments={"city": "Oslo"})
    built = build(
        Request(
            model="x",
            tools=[WEATHER, Tool(name="other")],
            messages=[
                Message.system("You are terse."),
                Message.user("first question"),
                Message(role="assistant", content=[call]),
                Message.tool_result("tu_1", "cold"),
                Message.assistant("It is cold."),
                Message.user("second question", ImagePart(url="https://x/y.png")),
            ],
        ),
        SONNET,
        provider="anthropic",
        wire_ids={"tu_1": "toolu_1"},
        stream=False,
    )
    b = built.body
    assert b["system"] == [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" not in b["tools"][0] and b["tools"][1]["cache_control"] == {"type": "ephemeral"}
    marked = [
        (i, j) for i, m in enumerate(b["messages"]) for j, block in enumerate(m["content"]) if "cache_control" in block
    ]
    # the end of the last user turn (the image) and of the user turn before it (the tool result)
    assert marked == [(2, 0), (4, 1)]
    total = sum(
        1
        for blk in [*b["system"], *b["tools"], *(x for m in b["messages"] for x in m["content"])]
        if "cache_control" in blk
    )
    assert total == 4


def test_auto_cache_off():
    built = body(Message.system("s"), Message.user("x"), tools=[WEATHER])
    text = str(built.body)
    assert "cache_control" not in text and built.body["system"] == "s"


def test_empty_text_blocks_are_not_sent():
    built = body(
        Message.user("x"),
        Message(role="assistant", content=[TextPart(text=""), ToolCallPart(id="tu_1", name="f")]),
        Message.tool_result("tu_1", "r"),
        wire_ids={"tu_1": "a"},
    )
    assert built.body["messages"][1]["content"] == [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]


ADAPTIVE = ModelInfo(
    id="anthropic:claude-opus-5-5",
    provider="anthropic",
    wire_name="claude-opus-5-5",
    max_output=128000,
    reasoning=True,
    thinking="adaptive",
)


@pytest.mark.parametrize(
    ("effort", "level"), [("minimal", "low"), ("low", "low"), ("medium", "medium"), ("high", "high")]
)
def test_adaptive_models_get_an_effort_not_a_budget(effort, level):
    schema = {"type": "object"}
    built = body(
        Message.user("x"),
        model=ADAPTIVE,
        reasoning_effort=effort,
        response_format=ResponseFormat(kind="json_schema", schema=schema),
    )
    assert built.body["thinking"] == {"type": "adaptive"}
    assert built.body["output_config"] == {
        "format": {"type": "json_schema", "schema": {"type": "object", "additionalProperties": False}},
        "effort": level,
    }
    assert built.body["max_tokens"] == 4096


def test_the_shipped_catalog_says_which_claude_models_think_adaptively():
    from trunkline.config.catalog import Catalog

    catalog = Catalog.load(providers={"anthropic"})
    assert catalog.resolve("opus").thinking == "adaptive"
    assert catalog.resolve("anthropic:claude-sonnet-4-5").thinking == "budget"
