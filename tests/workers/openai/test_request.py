"""Canonical request -> Responses API body: golden wire JSON, the model's rules, round trips."""

from __future__ import annotations

import pytest

from trunkline.protocol.messages import (
    AudioPart,
    DocumentPart,
    ImagePart,
    Message,
    ModelInfo,
    ModelRules,
    ProviderPart,
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
from trunkline.workers.errors import ProviderError
from trunkline.workers.openai.request import build, nearest_effort

GPT5 = ModelInfo(
    id="openai:gpt-5", provider="openai", wire_name="gpt-5", reasoning=True, vision=True, structured_output=True
)
GPT41 = ModelInfo(id="openai:gpt-4.1", provider="openai", wire_name="gpt-4.1", vision=True)
REASONING_ITEM = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "Think."}],
    "encrypted_content": "gAAAAenc==",
}


def test_a_whole_conversation_in_wire_form():
    request = Request(
        model="openai:gpt-5",
        messages=[
            Message.system("Be brief."),
            Message.developer("Use metric units."),
            Message.user(
                "Weather here?",
                ImagePart(url="https://x/p.png", detail="low"),
                ImagePart(data="iVBO", media_type="image/png"),
                DocumentPart(data="JVBER", media_type="application/pdf", name="forecast.pdf"),
                DocumentPart(url="https://x/report.pdf"),
            ),
            Message.assistant(
                ThinkingPart(text="Think.", provider="openai"),
                ProviderPart(api="openai", kind="reasoning", data=REASONING_ITEM, provider="openai"),
                ProviderPart(
                    api="openai", kind="message", data={"type": "message", "id": "msg_1", "phase": "commentary"}
                ),
                TextPart(text="Checking"),
                TextPart(text=" now."),
                ToolCallPart(
                    id="tu_A", name="get_weather", arguments={"city": "Zürich"}, provider_id="call_A", provider="openai"
                ),
                ToolCallPart(id="tu_B", name="now", arguments={}),
            ),
            Message.tool_result("tu_A", "18°C"),
            Message.tool_result("tu_B", "clock broken", is_error=True),
            Message(role="tool", tool_call_id="tu_C", content=[TextPart(text="legacy form")]),
        ],
        tools=[
            Tool(
                name="get_weather",
                description="Weather for a city",
                parameters={"type": "object", "properties": {"city": {"type": "string"}}},
            ),
            Tool(name="now", strict=True),
        ],
        tool_choice=ToolChoice(mode="required"),
        max_tokens=500,
        reasoning_effort="high",
    )
    built = build(request, GPT5, wire_ids={"tu_A": "call_A", "tu_B": "tu_B", "tu_C": "call_C"})
    assert built.body == {
        "model": "gpt-5",
        "instructions": "Be brief.\n\nUse metric units.",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Weather here?"},
                    {"type": "input_image", "image_url": "https://x/p.png", "detail": "low"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "auto"},
                    {
                        "type": "input_file",
                        "file_data": "data:application/pdf;base64,JVBER",
                        "filename": "forecast.pdf",
                    },
                    {"type": "input_file", "file_url": "https://x/report.pdf"},
                ],
            },
            REASONING_ITEM,
            {"type": "message", "role": "assistant", "phase": "commentary", "content": "Checking now."},
            {"type": "function_call", "call_id": "call_A", "name": "get_weather", "arguments": '{"city": "Zürich"}'},
            {"type": "function_call", "call_id": "tu_B", "name": "now", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_A", "output": "18°C"},
            {"type": "function_call_output", "call_id": "tu_B", "output": "ERROR: clock broken"},
            {"type": "function_call_output", "call_id": "call_C", "output": "legacy form"},
        ],
        "store": False,
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "strict": False,
            },
            # strict mode needs the object closed
            {
                "type": "function",
                "name": "now",
                "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
                "strict": True,
            },
        ],
        "tool_choice": "required",
        "max_output_tokens": 500,
        "reasoning": {"effort": "high", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "stream": True,
    }
    assert built.warnings == []  # OpenAI's own thinking travels in its reasoning item: nothing was lost


def test_named_tool_choice_structured_output_and_options_merge():
    request = Request(
        model="openai:gpt-4.1",
        messages=[Message.user("hi")],
        tools=[Tool(name="f")],
        tool_choice=ToolChoice(mode="tool", name="f"),
        response_format=ResponseFormat(
            kind="json_schema",
            name="answer",
            strict=True,
            schema={
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["a"],
                "additionalProperties": False,
            },
        ),
        metadata={"user_id": "u-42"},
        provider_options={
            "openai": {
                "prompt_cache_key": "k1",
                "service_tier": "flex",
                "parallel_tool_calls": False,
                "store": True,
            }
        },
    )
    body = build(request, GPT41, stream=False).body
    assert body["tool_choice"] == {"type": "function", "name": "f"}
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "answer",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["a"],
                "additionalProperties": False,
            },
        }
    }
    assert body["prompt_cache_key"] == "k1" and body["service_tier"] == "flex"
    assert body["parallel_tool_calls"] is False and body["store"] is True  # the caller's choice wins
    assert body["safety_identifier"] == "u-42"
    assert "stream" not in body and "include" not in body and "reasoning" not in body  # gpt-4.1 does not reason
    json_object = build(
        Request(model="m", messages=[Message.user("x")], response_format=ResponseFormat(kind="json_object")), GPT41
    ).body
    assert json_object["text"] == {"format": {"type": "json_object"}}


def test_a_strict_schema_gets_every_object_closed_as_openai_requires():
    # What generate_object sends for a class with a nested class and a list of them.
    address = {"title": "Address", "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    schema = {
        "$ref": "#/$defs/Person",
        "$defs": {
            "Address": address,
            "Person": {
                "title": "Person",
                "type": "object",
                "required": ["name", "homes", "pet"],
                "properties": {
                    "name": {"type": "string"},
                    "homes": {"type": "array", "items": {"$ref": "#/$defs/Address"}},
                    "pet": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {}, "required": []}]},
                },
            },
        },
    }
    request = Request(
        model="openai:gpt-5",
        messages=[Message.user("x")],
        response_format=ResponseFormat(kind="json_schema", name="Person", schema=schema, strict=True),
    )
    built = build(request, GPT5)
    closed = {
        "title": "Address",
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    assert built.body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "Person",
            "strict": True,
            "schema": {
                "$ref": "#/$defs/Person",
                "$defs": {
                    "Address": closed,
                    "Person": {
                        "title": "Person",
                        "type": "object",
                        "required": ["name", "homes", "pet"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "homes": {"type": "array", "items": {"$ref": "#/$defs/Address"}},
                            "pet": {
                                "anyOf": [
                                    {"type": "null"},
                                    {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
                                ]
                            },
                        },
                    },
                },
            },
        }
    }
    assert built.warnings == []
    assert "additionalProperties" not in schema["$defs"]["Address"]  # the caller's schema is left as it was


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]},
            "properties b are optional",
        ),
        (
            {
                "type": "object",
                "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}},
                "required": ["tags"],
            },
            "an object allows additional properties",
        ),
        (
            {"type": "object", "properties": {"any": {"type": "object"}}, "required": ["any"]},
            "an object lists no properties",
        ),
    ],
)
def test_a_schema_strict_mode_cannot_take_is_sent_non_strict_with_a_warning(schema, problem):
    request = Request(
        model="openai:gpt-5",
        messages=[Message.user("x")],
        response_format=ResponseFormat(kind="json_schema", name="r", schema=schema, strict=True),
    )
    built = build(request, GPT5)
    assert built.body["text"] == {"format": {"type": "json_schema", "name": "r", "schema": schema, "strict": False}}
    (warning,) = built.warnings
    assert warning.code == "unsupported_setting" and problem in warning.message
    tool = build(
        Request(
            model="openai:gpt-5", messages=[Message.user("x")], tools=[Tool(name="f", parameters=schema, strict=True)]
        ),
        GPT5,
    )
    assert tool.body["tools"] == [{"type": "function", "name": "f", "parameters": schema, "strict": False}]
    assert "tool f's parameters" in tool.warnings[0].message


def test_built_in_tools_pass_through_and_their_items_go_back():
    web = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "weather"},
    }
    request = Request(
        model="openai:gpt-5",
        messages=[
            Message.user("search"),
            Message.assistant(ProviderPart(api="openai", kind="web_search_call", data=web), TextPart(text="Sunny.")),
            Message.user("thanks"),
        ],
        provider_options={"openai": {"tools": [{"type": "web_search"}], "include": ["web_search_call.action.sources"]}},
    )
    body = build(request, GPT5).body
    assert body["tools"] == [{"type": "web_search"}]
    assert body["include"] == ["reasoning.encrypted_content", "web_search_call.action.sources"]
    assert body["input"][1] == web
    assert body["input"][2] == {"type": "message", "role": "assistant", "content": "Sunny."}


def test_reasoning_from_elsewhere_is_dropped_with_a_warning():
    request = Request(
        model="openai:gpt-5",
        messages=[
            Message.user("2+2?"),
            Message.assistant(
                ThinkingPart(text="Two plus two.", signature="sig", provider="anthropic"),
                RedactedThinkingPart(data="xx", provider="anthropic"),
                ProviderPart(api="anthropic", kind="server_tool_use", data={"id": "s"}),
                TextPart(text="4"),
            ),
            Message.user("and 3+3?"),
        ],
    )
    built = build(request, GPT5)
    assert built.body["input"][1] == {"type": "message", "role": "assistant", "content": "4"}
    assert sorted(w.code for w in built.warnings) == ["provider_part_dropped", "thinking_dropped"]


def test_reasoning_tied_to_another_model_is_dropped():
    tied = ModelInfo(
        id="openai:gpt-6-sol",
        provider="openai",
        wire_name="gpt-6-sol",
        reasoning=True,
        rules=ModelRules(thinking_tied_to_model=True),
    )
    part = ProviderPart(api="openai", kind="reasoning", data=REASONING_ITEM, model="gpt-5")
    request = Request(
        model="openai:gpt-6-sol",
        messages=[
            Message.user("a"),
            Message.assistant(ThinkingPart(text="Think.", provider="openai"), part, TextPart(text="b")),
            Message.user("c"),
        ],
    )
    built = build(request, tied)
    assert [i.get("type") for i in built.body["input"]] == ["message", "message", "message"]
    assert {w.code for w in built.warnings} == {"provider_part_dropped", "thinking_dropped"}
    same = build(request, GPT5)
    assert same.body["input"][1] == REASONING_ITEM and same.warnings == []


def test_sampling_follows_the_models_rules():
    no_sampling = ModelInfo(
        id="openai:gpt-5", provider="openai", wire_name="gpt-5", reasoning=True, rules=ModelRules(sampling=[])
    )
    built = build(Request(model="m", messages=[Message.user("x")], temperature=0.2, top_p=0.9), no_sampling)
    assert "temperature" not in built.body and "top_p" not in built.body
    assert all("rule: sampling" in w.message for w in built.warnings) and len(built.warnings) == 2
    only_off = ModelInfo(
        id="openai:gpt-5.1",
        provider="openai",
        wire_name="gpt-5.1",
        reasoning=True,
        rules=ModelRules(sampling=["temperature", "top_p"], sampling_needs_no_reasoning=True),
    )
    on = build(Request(model="m", messages=[Message.user("x")], temperature=0.2, reasoning_effort="low"), only_off)
    assert "temperature" not in on.body and "sampling_needs_no_reasoning" in on.warnings[0].message
    off = build(Request(model="m", messages=[Message.user("x")], temperature=0.2, reasoning_effort="none"), only_off)
    assert off.body["temperature"] == 0.2 and off.body["reasoning"] == {"effort": "none"} and not off.warnings
    exclusive = ModelInfo(
        id="openai:x",
        provider="openai",
        wire_name="x",
        rules=ModelRules(sampling=["temperature", "top_p"], sampling_exclusive=True),
    )
    one = build(Request(model="m", messages=[Message.user("x")], temperature=0.2, top_p=0.5), exclusive)
    assert one.body["temperature"] == 0.2 and "top_p" not in one.body
    assert "sampling_exclusive" in one.warnings[0].message
    free = build(Request(model="m", messages=[Message.user("x")], temperature=0.2, top_p=0.5), GPT41)
    assert free.body["temperature"] == 0.2 and free.body["top_p"] == 0.5 and not free.warnings


def test_effort_takes_the_models_values():
    ladder = ModelInfo(
        id="openai:gpt-6-sol",
        provider="openai",
        wire_name="gpt-6-sol",
        reasoning=True,
        rules=ModelRules(efforts=["low", "medium", "high", "xhigh"]),
    )
    built = build(Request(model="m", messages=[Message.user("x")], reasoning_effort="minimal"), ladder)
    assert built.body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert "rule: efforts" in built.warnings[0].message and "minimal" in built.warnings[0].message
    assert (
        build(Request(model="m", messages=[Message.user("x")], reasoning_effort="max"), ladder).body["reasoning"][
            "effort"
        ]
        == "xhigh"
    )
    assert build(Request(model="m", messages=[Message.user("x")], reasoning_effort="xhigh"), ladder).warnings == []
    assert nearest_effort("none", ["low", "high"]) == "low"
    assert nearest_effort("medium", ["low", "high"]) == "high"  # a tie goes up
    not_reasoning = build(Request(model="m", messages=[Message.user("x")], reasoning_effort="high"), GPT41)
    assert "reasoning" not in not_reasoning.body and not_reasoning.warnings[0].code == "reasoning_unsupported"
    no_summary = build(
        Request(
            model="m",
            messages=[Message.user("x")],
            reasoning_effort="low",
            provider_options={"openai": {"reasoning_summary": None}},
        ),
        GPT5,
    )
    assert no_summary.body["reasoning"] == {"effort": "low"} and "reasoning_summary" not in no_summary.body


def test_what_the_responses_api_lacks_is_a_warning():
    built = build(Request(model="m", messages=[Message.user("x")], stop_sequences=["END"], seed=7), GPT41)
    assert "stop" not in built.body and "seed" not in built.body
    assert [w.code for w in built.warnings] == ["unsupported_setting", "unsupported_setting"]


def test_default_max_tokens_from_the_rules():
    capped = ModelInfo(id="openai:x", provider="openai", wire_name="x", rules=ModelRules(default_max_tokens=8192))
    assert build(Request(model="m", messages=[Message.user("x")]), capped).body["max_output_tokens"] == 8192
    assert "max_output_tokens" not in build(Request(model="m", messages=[Message.user("x")]), GPT41).body


@pytest.mark.parametrize(("asked", "sent"), [(1, 16), (15, 16), (16, 16), (17, 17)])
def test_max_output_tokens_below_sixteen_is_raised_to_sixteen(asked, sent):
    built = build(Request(model="m", messages=[Message.user("x")], max_tokens=asked), GPT41)
    assert built.body["max_output_tokens"] == sent
    raised = [w for w in built.warnings if w.code == "max_tokens_raised"]
    assert len(raised) == (asked < 16)
    assert not raised or f"{asked} was sent as 16" in raised[0].message


def test_reasoning_in_provider_options_wins_over_reasoning_effort_with_a_warning():
    options = {"openai": {"reasoning": {"effort": "high", "summary": "detailed"}}}
    both = build(
        Request(model="m", messages=[Message.user("x")], reasoning_effort="low", provider_options=options), GPT5
    )
    assert both.body["reasoning"] == {"effort": "high", "summary": "detailed"}
    (warning,) = [w for w in both.warnings if w.code == "reasoning_effort_overridden"]
    assert "provider_options.openai.reasoning" in warning.message and "reasoning_effort low" in warning.message
    alone = build(Request(model="m", messages=[Message.user("x")], provider_options=options), GPT5)
    assert alone.body["reasoning"] == {"effort": "high", "summary": "detailed"} and alone.warnings == []


def test_audio_is_refused_before_any_call():
    # The SDK's input content union is input_text, input_image, input_file: no audio.
    request = Request(model="m", messages=[Message.user("listen", AudioPart(data="UklG", media_type="audio/wav"))])
    with pytest.raises(ProviderError) as info:
        build(request, GPT5)
    assert info.value.error_class == "invalid_request" and "audio" in info.value.message


def test_tool_results_with_images_and_results_inside_a_user_message():
    request = Request(
        model="m",
        messages=[
            Message.user("look"),
            Message.assistant(ToolCallPart(id="tu_1", name="shot", arguments={})),
            Message(
                role="user",
                content=[
                    ToolResultPart(
                        tool_call_id="tu_1",
                        content=[TextPart(text="here"), ImagePart(url="https://x/s.png")],
                        is_error=True,
                    ),
                    TextPart(text="what is it?"),
                ],
            ),
        ],
    )
    items = build(request, GPT5).body["input"]
    assert items[2] == {
        "type": "function_call_output",
        "call_id": "tu_1",
        "output": [
            {"type": "input_text", "text": "ERROR:"},
            {"type": "input_text", "text": "here"},
            {"type": "input_image", "image_url": "https://x/s.png", "detail": "auto"},
        ],
    }
    assert items[3] == {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "what is it?"}]}


def test_nothing_to_send_is_an_invalid_request():
    with pytest.raises(ProviderError, match="nothing to send"):
        build(Request(model="m", messages=[Message.system("only instructions")]), GPT41)


def test_a_phase_labels_only_the_message_item_it_came_with():
    marker = ProviderPart(api="openai", kind="message", data={"type": "message", "id": "msg_1", "phase": "commentary"})
    request = Request(
        model="m",
        messages=[
            Message.user("x"),
            Message.assistant(
                marker,
                TextPart(text="Looking."),
                ToolCallPart(id="tu_1", name="f", arguments={}),
                TextPart(text="Done."),
            ),
            Message.tool_result("tu_1", "ok"),
        ],
    )
    items = build(request, GPT5).body["input"]
    assert items[1] == {"type": "message", "role": "assistant", "content": "Looking.", "phase": "commentary"}
    assert items[3] == {"type": "message", "role": "assistant", "content": "Done."}
