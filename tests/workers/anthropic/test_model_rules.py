"""Anthropic request bodies under each model's catalog rules (issue 12), golden wire JSON.

Each test is one defect seen against the real API: the body the translator builds
for the shipped catalog entry, and the warning that says what was left out.
"""

from __future__ import annotations

import pytest

from trunkline.config.catalog import Catalog
from trunkline.protocol.messages import (
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
)
from trunkline.workers.anthropic.request import build
from trunkline.workers.errors import ProviderError

CATALOG = Catalog.load(providers={"anthropic"})
NO_CACHE = {"anthropic": {"auto_cache": False}}
WEATHER = Tool(name="get-weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
USER = {"role": "user", "content": [{"type": "text", "text": "hi"}]}


def model(name: str) -> ModelInfo:
    return CATALOG.resolve(name, "anthropic")


def build_for(name: str, *messages: Message, **fields):
    fields.setdefault("provider_options", NO_CACHE)
    info = model(name)
    return build(
        Request(model=info.id, messages=list(messages) or [Message.user("hi")], **fields),
        info,
        provider="anthropic",
        wire_ids={"tu_1": "toolu_1"},
        stream=False,
    )


#: The nine catalogued Claude models that answer 400 to any sampling parameter.
NO_SAMPLING = [
    "claude-fable-5-1",
    "claude-fable-5",
    "claude-opus-5-5",
    "claude-opus-5",
    "claude-opus-4-8",
    "claude-opus-4-7",
    "claude-sonnet-5-5",
    "claude-sonnet-5",
    "claude-haiku-5-5",
]


@pytest.mark.parametrize("name", [*NO_SAMPLING, "sonnet", "opus", "haiku"])
def test_models_that_refuse_sampling_get_none(name):
    built = build_for(name, temperature=0.7, top_p=0.9)
    assert "temperature" not in built.body and "top_p" not in built.body
    info = model(name)
    assert [w.message for w in built.warnings] == [
        f"{info.id} does not take temperature (rule `sampling`); it was left out",
        f"{info.id} does not take top_p (rule `sampling`); it was left out",
    ]


def test_the_catalog_lists_exactly_those_nine():
    claude = list(CATALOG.models("anthropic"))
    assert len(claude) == 14
    assert sorted(m.wire_name for m in claude if m.rules.sampling == []) == sorted(NO_SAMPLING)


def test_opus_4_7_golden_body_without_sampling():
    built = build_for("claude-opus-4-7", temperature=0.2)
    assert built.body == {"model": "claude-opus-4-7", "max_tokens": 16000, "messages": [USER]}


@pytest.mark.parametrize("name", ["claude-sonnet-4-5", "claude-sonnet-4-6", "claude-haiku-4-5"])
def test_models_that_refuse_the_two_together_get_temperature_only(name):
    built = build_for(name, temperature=0.3, top_p=0.8)
    assert built.body == {"model": name, "max_tokens": 16000, "messages": [USER], "temperature": 0.3}
    assert [w.message for w in built.warnings] == [
        (
            f"anthropic:{name} takes one sampling parameter per request (rule `sampling_exclusive`); temperature "
            "was sent and top_p left out"
        )
    ]
    assert build_for(name, top_p=0.8).body["top_p"] == 0.8


@pytest.mark.parametrize(
    ("name", "effort"),
    [
        ("claude-opus-4-6", "high"),
        ("claude-opus-4-6", "max"),
        ("claude-sonnet-4-6", "low"),
        ("claude-opus-4-7", "xhigh"),
        ("claude-opus-5-5", "medium"),
        ("claude-fable-5-1", "max"),
    ],
)
def test_adaptive_models_get_adaptive_thinking_and_an_effort_never_a_budget(name, effort):
    built = build_for(name, reasoning_effort=effort)
    assert built.body == {
        "model": name,
        "max_tokens": 16000,
        "messages": [USER],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": effort},
    }
    assert built.warnings == []


def test_budget_models_keep_the_token_budget():
    built = build_for("claude-haiku-4-5", reasoning_effort="medium")
    assert built.body["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert "output_config" not in built.body


def test_effort_none_turns_off_a_model_that_thinks_unasked():
    assert build_for("claude-haiku-5-5", reasoning_effort="none").body["thinking"] == {"type": "disabled"}
    # Thinking is off by default on Opus 4.7: nothing to send.
    assert "thinking" not in build_for("claude-opus-4-7", reasoning_effort="none").body
    # No effort named: the model's own default applies, so nothing is sent.
    assert "thinking" not in build_for("claude-haiku-5-5").body


def test_a_forced_tool_on_a_model_that_thinks_unasked_turns_thinking_off():
    built = build_for("claude-haiku-5-5", tools=[WEATHER], tool_choice=ToolChoice(mode="tool", name="get-weather"))
    assert built.body["thinking"] == {"type": "disabled"}
    assert built.body["tool_choice"] == {"type": "tool", "name": "get-weather"}
    assert [w.code for w in built.warnings] == ["thinking_off"]


def test_a_forced_tool_with_asked_for_thinking_lets_the_model_choose():
    built = build_for(
        "claude-sonnet-4-6", reasoning_effort="high", tools=[WEATHER], tool_choice=ToolChoice(mode="required")
    )
    assert "tool_choice" not in built.body and built.body["thinking"] == {"type": "adaptive"}
    assert [w.code for w in built.warnings] == ["unsupported_setting"]


def test_tool_choice_none_is_sent_as_anthropics_none():
    built = build_for("claude-opus-5-5", tools=[WEATHER], tool_choice=ToolChoice(mode="none"))
    assert built.body["tool_choice"] == {"type": "none"}
    assert built.body["tools"] == [{"name": "get-weather", "input_schema": WEATHER.parameters}]


CALL = ToolCallPart(id="tu_1", name="get-weather", arguments={"city": "Oslo"}, provider="anthropic")


def _loop(*assistant_parts) -> list[Message]:
    return [
        Message.user("weather?"),
        Message(role="assistant", content=[*assistant_parts, CALL]),
        Message.tool_result("tu_1", "cold"),
    ]


def test_a_tool_loop_without_a_leading_thinking_block_runs_with_thinking_off():
    built = build_for(
        "claude-sonnet-4-6", *_loop(TextPart(text="Let me check.")), reasoning_effort="high", tools=[WEATHER]
    )
    assert built.body == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 16000,
        "tools": [{"name": "get-weather", "input_schema": WEATHER.parameters}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get-weather", "input": {"city": "Oslo"}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold"}]},
        ],
    }
    assert [w.code for w in built.warnings] == ["thinking_off"]


def test_a_tool_loop_opening_with_its_thinking_block_keeps_thinking():
    thought = ThinkingPart(text="need weather", signature="sig", provider="anthropic", model="claude-sonnet-4-6")
    built = build_for("claude-sonnet-4-6", *_loop(thought), reasoning_effort="high", tools=[WEATHER])
    assert built.body["thinking"] == {"type": "adaptive"} and built.body["output_config"] == {"effort": "high"}
    assert built.body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "need weather",
        "signature": "sig",
    }
    assert built.warnings == []


def test_a_foreign_tool_loop_on_a_model_that_thinks_unasked_disables_thinking():
    foreign = ThinkingPart(text="x", signature="s", provider="openai")
    built = build_for("claude-opus-5", *_loop(foreign), tools=[WEATHER])
    assert built.body["thinking"] == {"type": "disabled"}
    assert sorted(w.code for w in built.warnings) == ["thinking_dropped", "thinking_off"]


@pytest.mark.parametrize("name", ["claude-opus-5-5", "claude-sonnet-5-5", "claude-fable-5-1"])
def test_tied_thinking_goes_back_only_to_the_model_that_wrote_it(name):
    own = [
        ThinkingPart(text="mine", signature="s1", provider="anthropic", model=name),
        RedactedThinkingPart(data="r1", provider="anthropic", model=name),
        TextPart(text="answer"),
    ]
    built = build_for(name, Message.user("q"), Message(role="assistant", content=own), Message.user("more"))
    assert built.body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "mine", "signature": "s1"},
        {"type": "redacted_thinking", "data": "r1"},
        {"type": "text", "text": "answer"},
    ]
    assert built.warnings == []
    other = [
        ThinkingPart(text="theirs", signature="s2", provider="anthropic", model="claude-opus-5"),
        TextPart(text="answer"),
    ]
    built = build_for(name, Message.user("q"), Message(role="assistant", content=other), Message.user("more"))
    assert built.body["messages"][1]["content"] == [{"type": "text", "text": "answer"}]
    assert [w.message for w in built.warnings] == [
        (
            f"anthropic:{name} accepts only its own thinking blocks (rule `thinking_tied_to_model`); reasoning "
            "written by claude-opus-5 was dropped"
        )
    ]


def test_untied_models_take_thinking_from_another_claude_model():
    other = [
        ThinkingPart(text="t", signature="s", provider="anthropic", model="claude-opus-4-6"),
        TextPart(text="answer"),
    ]
    built = build_for(
        "claude-opus-5", Message.user("q"), Message(role="assistant", content=other), Message.user("more")
    )
    assert built.body["messages"][1]["content"][0]["type"] == "thinking" and built.warnings == []


def test_json_object_is_refused_clearly():
    with pytest.raises(ProviderError, match=r"json_object \(any JSON object\) has no form") as info:
        build_for("claude-sonnet-4-5", response_format=ResponseFormat(kind="json_object"))
    assert info.value.error_class == "invalid_request"


def test_schemas_get_additional_properties_false_on_every_object():
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "address": {"type": "object", "properties": {"city": {"type": "string"}}},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
        },
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
    }
    built = build_for("claude-sonnet-4-5", response_format=ResponseFormat(kind="json_schema", schema=schema))
    assert built.body["output_config"] == {
        "format": {
            "type": "json_schema",
            "schema": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string"},
                    "address": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "additionalProperties": False,
                    },
                    "tags": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"k": {"type": "string"}},
                            "additionalProperties": False,
                        },
                    },
                },
                "$defs": {
                    "point": {"type": "object", "properties": {"x": {"type": "number"}}, "additionalProperties": False}
                },
            },
        }
    }
    assert "additionalProperties" not in schema["properties"]["address"]  # the caller's schema is untouched


def test_a_schema_that_allows_extra_properties_is_refused():
    schema = {"type": "object", "properties": {"m": {"type": "object", "additionalProperties": True}}}
    with pytest.raises(ProviderError, match=r"schema\.properties\.m allows additional properties"):
        build_for("claude-sonnet-4-5", response_format=ResponseFormat(kind="json_schema", schema=schema))


def test_a_dated_snapshot_is_sent_as_named_with_its_entrys_rules_and_prices():
    info = CATALOG.resolve("claude-haiku-4-5-20251001")
    assert (info.id, info.wire_name) == ("anthropic:claude-haiku-4-5-20251001", "claude-haiku-4-5-20251001")
    entry = CATALOG.resolve("anthropic:claude-haiku-4-5")
    assert info.price == entry.price and info.rules == entry.rules
    assert CATALOG.resolve("claude-haiku-4-5-20251001", "anthropic").wire_name == "claude-haiku-4-5-20251001"
    built = build_for("claude-haiku-4-5-20251001", temperature=0.1, top_p=0.5)
    assert built.body["model"] == "claude-haiku-4-5-20251001" and "top_p" not in built.body
    # An undated alias still names the entry.
    assert CATALOG.resolve("haiku").wire_name == "claude-haiku-5-5"


def test_tool_strict_is_passed():
    strict = Tool(name="get-weather", parameters=WEATHER.parameters, strict=True)
    built = build_for("claude-sonnet-4-5", tools=[strict])
    assert built.body["tools"] == [{"name": "get-weather", "input_schema": WEATHER.parameters, "strict": True}]
    assert "strict" not in build_for("claude-sonnet-4-5", tools=[WEATHER]).body["tools"][0]
