"""Canonical request -> Gemini generateContent body: golden wire JSON."""

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
from trunkline.workers.gemini.request import SKIP_SIGNATURE, build

FLASH = ModelInfo(
    id="gemini:gemini-3.8-flash", provider="gemini", wire_name="gemini-3.8-flash", reasoning=True, thinking="adaptive"
)
OLD = ModelInfo(
    id="gemini:gemini-2.5-flash", provider="gemini", wire_name="gemini-2.5-flash", reasoning=True, thinking="budget"
)


def body(request: Request, model: ModelInfo = FLASH, **kw):
    built = build(request, model, **kw)
    return built.body, built.warnings, built.path


def test_a_plain_request_golden():
    request = Request(
        model=FLASH.id,
        messages=[
            Message.system("Be brief."),
            Message.developer("Answer in French."),
            Message.user(
                "Hi",
                ImagePart(data="iVBORw0=", media_type="image/png"),
                ImagePart(url="https://example.com/cat.jpg"),
                AudioPart(url="gs://bucket/a.mp3", media_type="audio/mpeg"),
                DocumentPart(data="JVBERi0=", media_type="application/pdf"),
            ),
        ],
        tools=[
            Tool(
                name="get_weather",
                description="Weather now",
                parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            )
        ],
        tool_choice=ToolChoice(mode="tool", name="get_weather"),
        temperature=0.3,
        top_p=0.9,
        max_tokens=500,
        stop_sequences=["END"],
        seed=7,
        response_format=ResponseFormat(kind="json_schema", schema={"type": "object"}),
    )
    wire, warnings, path = body(request)
    assert path == "/v1beta/models/gemini-3.8-flash:streamGenerateContent?alt=sse"
    assert warnings == []
    assert wire == {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "Hi"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0="}},
                    {"fileData": {"fileUri": "https://example.com/cat.jpg", "mimeType": "image/jpeg"}},
                    {"fileData": {"fileUri": "gs://bucket/a.mp3", "mimeType": "audio/mpeg"}},
                    {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}},
                ],
            }
        ],
        "systemInstruction": {"parts": [{"text": "Be brief.\n\nAnswer in French."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Weather now",
                        "parametersJsonSchema": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}},
                            "required": ["city"],
                        },
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
        "generationConfig": {
            "maxOutputTokens": 500,
            "temperature": 0.3,
            "topP": 0.9,
            "stopSequences": ["END"],
            "seed": 7,
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "object"},
        },
    }
    assert build(request, FLASH, stream=False).path == "/v1beta/models/gemini-3.8-flash:generateContent"


@pytest.mark.parametrize(("mode", "expected"), [("auto", "AUTO"), ("none", "NONE"), ("required", "ANY")])
def test_tool_choice_modes(mode, expected):
    wire, _, _ = body(
        Request(model=FLASH.id, messages=[Message.user("x")], tools=[Tool(name="f")], tool_choice=ToolChoice(mode=mode))
    )
    assert wire["toolConfig"] == {"functionCallingConfig": {"mode": expected}}


def conversation(sig_model: str = "gemini-3.8-flash", sig_provider: str = "gemini") -> list[Message]:
    """A Gemini turn with two parallel calls (one id-less) and a signed text, then the results."""

    def sig(data: str) -> ProviderPart:
        return ProviderPart(api="gemini", kind="thoughtSignature", data=data, model=sig_model, provider=sig_provider)

    return [
        Message.user("Weather in Paris and Rome?"),
        Message.assistant(
            ThinkingPart(text="Two cities.", provider="gemini"),
            sig("c2lnLXRob3VnaHQ="),
            TextPart(text="Checking."),
            sig("c2lnLXRleHQ="),
            ToolCallPart(
                id="tu_paris",
                name="get_weather",
                arguments={"city": "Paris"},
                provider_id="8hd01vsf",
                provider="gemini",
            ),
            sig("c2lnLWNhbGw="),
            ToolCallPart(id="tu_rome", name="get_weather", arguments={"city": "Rome"}, provider="gemini"),
        ),
        Message.tool_result("tu_paris", "18°C"),
        Message.tool_result("tu_rome", '{"temp": 21}'),
    ]


def test_a_tool_turn_goes_back_with_each_signature_on_its_own_part_golden():
    wire, warnings, _ = body(Request(model=FLASH.id, messages=conversation(), tools=[Tool(name="get_weather")]))
    assert warnings == []
    assert wire["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Two cities.", "thought": True, "thoughtSignature": "c2lnLXRob3VnaHQ="},
                {"text": "Checking.", "thoughtSignature": "c2lnLXRleHQ="},
                {
                    "functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "8hd01vsf"},
                    "thoughtSignature": "c2lnLWNhbGw=",
                },
                {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},  # Gemini gave it no id
            ],
        },
        # parallel results share one turn, by function name; a string is wrapped, JSON goes as structure
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"result": "18°C"}, "id": "8hd01vsf"}},
                {"functionResponse": {"name": "get_weather", "response": {"temp": 21}}},
            ],
        },
    ]


def test_signatures_are_stripped_for_another_model_with_a_warning_and_the_first_call_marked():
    wire, warnings, _ = body(
        Request(model="gemini:gemini-4-argon", messages=conversation()),
        ModelInfo(id="gemini:gemini-4-argon", provider="gemini", wire_name="gemini-4-argon", thinking="adaptive"),
    )
    model_turn = wire["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in model_turn] == [None, None, SKIP_SIGNATURE, None]
    assert warnings and all(w.code == "provider_part_dropped" for w in warnings)
    assert "gemini-3.8-flash" in warnings[0].message and "gemini-4-argon" in warnings[0].message


def test_signatures_from_another_key_are_stripped():
    wire, warnings, _ = body(Request(model=FLASH.id, messages=conversation(sig_provider="gemini-work")))
    assert [p.get("thoughtSignature") for p in wire["contents"][1]["parts"]] == [None, None, SKIP_SIGNATURE, None]
    assert any("gemini-work" in w.message for w in warnings)


def test_gemini_2_gets_no_skip_marker():
    wire, _, _ = body(Request(model=OLD.id, messages=conversation()), OLD)
    assert not any("thoughtSignature" in p for p in wire["contents"][1]["parts"])


def test_a_conversation_from_another_provider():
    messages = [
        Message.user("hi"),
        Message.assistant(
            ThinkingPart(text="hmm", signature="anthropic-sig", provider="anthropic"),
            RedactedThinkingPart(data="xx", provider="anthropic"),
            ProviderPart(api="anthropic", kind="server_tool_use", data={"id": "s"}),
            ToolCallPart(id="tu_01", name="lookup", arguments={"q": 1}, provider_id="toolu_1", provider="anthropic"),
        ),
        Message(role="tool", tool_call_id="tu_01", content=[TextPart(text="found")]),
    ]
    wire, warnings, _ = body(Request(model=FLASH.id, messages=messages), wire_ids={"tu_01": "tu_01"})
    assert wire["contents"][1] == {
        "role": "model",
        "parts": [
            {"functionCall": {"name": "lookup", "args": {"q": 1}, "id": "tu_01"}, "thoughtSignature": SKIP_SIGNATURE}
        ],
    }
    assert wire["contents"][2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "lookup", "response": {"result": "found"}, "id": "tu_01"}}],
    }
    assert sorted({w.code for w in warnings}) == ["provider_part_dropped", "thinking_dropped"]


def test_error_results_and_images_in_results():
    messages = [
        Message.user("x"),
        Message.assistant(ToolCallPart(id="tu_1", name="shot", provider="gemini", provider_id="a1")),
        Message(role="tool", content=[ToolResultPart(tool_call_id="tu_1", is_error=True, content="disk full")]),
        Message.assistant(ToolCallPart(id="tu_2", name="shot", provider="gemini", provider_id="a2")),
        Message(
            role="tool",
            content=[
                ToolResultPart(
                    tool_call_id="tu_2", content=[TextPart(text="here"), ImagePart(data="AAA=", media_type="image/png")]
                )
            ],
        ),
    ]
    wire, _, _ = body(Request(model=FLASH.id, messages=messages))
    assert wire["contents"][2]["parts"] == [
        {"functionResponse": {"name": "shot", "response": {"error": "disk full"}, "id": "a1"}}
    ]
    assert wire["contents"][4]["parts"] == [
        {
            "functionResponse": {
                "name": "shot",
                "response": {"result": "here"},
                "id": "a2",
                "parts": [{"inlineData": {"mimeType": "image/png", "data": "AAA="}}],
            }
        }
    ]


def test_verbatim_gemini_parts_go_back_and_a_lone_signature_is_a_signed_empty_text():
    code = {"executableCode": {"language": "PYTHON", "code": "print(2)"}}
    messages = [
        Message.user("x"),
        Message.assistant(
            ProviderPart(api="gemini", kind="executableCode", data=code, provider="gemini"),
            ProviderPart(
                api="gemini", kind="thoughtSignature", data="c2ln", model="gemini-3.8-flash", provider="gemini"
            ),
            TextPart(text="2"),
        ),
        Message.user("y"),
    ]
    wire, _warnings, _ = body(Request(model=FLASH.id, messages=messages))
    # a signature right after a verbatim part belongs to that part
    assert wire["contents"][1]["parts"] == [dict(code, thoughtSignature="c2ln"), {"text": "2"}]
    messages[1] = Message.assistant(
        TextPart(text="a"),
        ProviderPart(
            api="gemini",
            kind="text",
            data={"text": "", "thoughtSignature": "c2ln"},
            model="gemini-3.8-flash",
            provider="gemini",
        ),
    )
    wire, _, _ = body(Request(model=FLASH.id, messages=messages))
    assert wire["contents"][1]["parts"] == [{"text": "a"}, {"text": "", "thoughtSignature": "c2ln"}]


# ---------------------------------------------------------------------------
# thinking and sampling, per the catalog's rules


@pytest.mark.parametrize(
    ("effort", "config"),
    [
        ("minimal", {"thinkingLevel": "MINIMAL", "includeThoughts": True}),
        ("low", {"thinkingLevel": "LOW", "includeThoughts": True}),
        ("medium", {"thinkingLevel": "MEDIUM", "includeThoughts": True}),
        ("high", {"thinkingLevel": "HIGH", "includeThoughts": True}),
        ("xhigh", {"thinkingLevel": "XHIGH", "includeThoughts": True}),
    ],
)
def test_level_models_take_a_thinking_level(effort, config):
    wire, warnings, _ = body(Request(model=FLASH.id, messages=[Message.user("x")], reasoning_effort=effort))
    assert wire["generationConfig"]["thinkingConfig"] == config and not warnings
    assert "thinkingBudget" not in wire["generationConfig"]["thinkingConfig"]


@pytest.mark.parametrize(
    ("effort", "config"),
    [
        ("none", {"thinkingBudget": 0}),
        ("low", {"thinkingBudget": 2048, "includeThoughts": True}),
        ("high", {"thinkingBudget": 24576, "includeThoughts": True}),
    ],
)
def test_budget_models_take_a_thinking_budget(effort, config):
    wire, _, _ = body(Request(model=OLD.id, messages=[Message.user("x")], reasoning_effort=effort), OLD)
    assert wire["generationConfig"]["thinkingConfig"] == config


def test_the_catalogs_efforts_pick_the_nearest_level_with_a_warning():
    argon = ModelInfo(
        id="gemini:gemini-4-argon",
        provider="gemini",
        wire_name="gemini-4-argon",
        thinking="adaptive",
        rules=ModelRules(efforts=["low", "medium", "high"], thinking_always_on=True),
    )
    wire, warnings, _ = body(Request(model=argon.id, messages=[Message.user("x")], reasoning_effort="minimal"), argon)
    assert wire["generationConfig"]["thinkingConfig"]["thinkingLevel"] == "LOW"
    assert "minimal" in warnings[0].message
    wire, warnings, _ = body(Request(model=argon.id, messages=[Message.user("x")], reasoning_effort="none"), argon)
    assert wire["generationConfig"]["thinkingConfig"] == {"thinkingLevel": "LOW"}
    assert any("cannot be turned off" in w.message for w in warnings)


def test_a_model_the_catalog_does_not_describe_is_judged_by_its_generation():
    unknown3 = ModelInfo(id="gemini:gemini-3.9-pro", provider="gemini", wire_name="gemini-3.9-pro")
    unknown2 = ModelInfo(id="gemini:gemini-2.0-flash", provider="gemini", wire_name="gemini-2.0-flash")
    req = Request(model="x", messages=[Message.user("x")], reasoning_effort="medium")
    assert "thinkingLevel" in body(req, unknown3)[0]["generationConfig"]["thinkingConfig"]
    assert "thinkingBudget" in body(req, unknown2)[0]["generationConfig"]["thinkingConfig"]


LITE = ModelInfo(
    id="gemini:gemini-2.5-flash-lite",
    provider="gemini",
    wire_name="gemini-2.5-flash-lite",
    reasoning=True,
    thinking="budget",
)
PRO = ModelInfo(id="gemini:gemini-2.5-pro", provider="gemini", wire_name="gemini-2.5-pro", thinking="budget")
FLASH3 = ModelInfo(id="gemini:gemini-3-flash-preview", provider="gemini", wire_name="gemini-3-flash-preview")


def ask(model: ModelInfo, **fields) -> tuple[dict, list]:
    built = build(Request(model=model.id, messages=[Message.user("x")], **fields), model)
    return built.body.get("generationConfig", {}), built.warnings


@pytest.mark.parametrize(
    ("model", "effort", "budget"),
    [
        (OLD, "xhigh", 24576),  # 2.5 Flash tops out at 24576
        (OLD, "max", 24576),
        (LITE, "minimal", 512),
        (LITE, "max", 24576),
        (PRO, "xhigh", 32768),
        (PRO, "max", 32768),
        (PRO, "none", 512),  # 2.5 Pro cannot stop thinking: its lowest rung
    ],
)
def test_the_top_of_the_effort_ladder_is_each_models_own_largest_budget(model, effort, budget):
    gen, warnings = ask(model, reasoning_effort=effort)
    assert gen["thinkingConfig"]["thinkingBudget"] == budget
    assert all(w.code != "thinking_budget_changed" for w in warnings)  # nothing the caller gave was changed


@pytest.mark.parametrize(
    ("model", "asked", "sent"),
    [
        (OLD, 30000, 24576),
        (OLD, 0, 0),
        (OLD, -1, -1),
        (LITE, 100, 512),
        (LITE, 30000, 24576),
        (LITE, 0, 0),
        (PRO, 0, 128),
        (PRO, 50000, 32768),
        (PRO, 2000, 2000),
    ],
)
def test_a_callers_thinking_budget_is_kept_within_the_models_range(model, asked, sent):
    gen, warnings = ask(model, provider_options={"gemini": {"thinking_config": {"thinkingBudget": asked}}})
    assert gen["thinkingConfig"] == {"thinkingBudget": sent}
    changed = [w for w in warnings if w.code == "thinking_budget_changed"]
    assert len(changed) == (asked != sent)
    assert not changed or f"({asked}) was sent as {sent}" in changed[0].message


def test_gemini_3_flash_takes_four_thinking_levels():
    gen, warnings = ask(FLASH3, reasoning_effort="xhigh")
    assert gen["thinkingConfig"] == {"thinkingLevel": "HIGH", "includeThoughts": True}
    assert "xhigh" in warnings[0].message
    gen, warnings = ask(FLASH3, reasoning_effort="minimal")
    assert gen["thinkingConfig"] == {"thinkingLevel": "MINIMAL", "includeThoughts": True} and not warnings
    gen, warnings = ask(FLASH3, provider_options={"gemini": {"thinking_config": {"thinkingLevel": "XHIGH"}}})
    assert gen["thinkingConfig"] == {"thinkingLevel": "HIGH"}
    assert "MINIMAL, LOW, MEDIUM, HIGH" in warnings[0].message and "XHIGH was sent as HIGH" in warnings[0].message


def test_more_than_five_stop_sequences_keep_the_first_five():
    stops = ["a", "b", "c", "d", "e", "f", "g"]
    gen, warnings = ask(FLASH, stop_sequences=stops)
    assert gen["stopSequences"] == ["a", "b", "c", "d", "e"]
    (warning,) = warnings
    assert (
        warning.code == "stop_sequences_truncated" and "at most 5" in warning.message and "'f', 'g'" in warning.message
    )
    assert ask(FLASH, stop_sequences=stops[:5]) == ({"stopSequences": stops[:5]}, [])


def test_a_budget_that_would_leave_no_answer_gets_room():
    # the caller's limit stays and the budget goes under it
    gen, warnings = ask(OLD, reasoning_effort="high", max_tokens=4000)
    assert gen["maxOutputTokens"] == 4000 and gen["thinkingConfig"]["thinkingBudget"] == 2000
    assert warnings[0].code == "thinking_budget_changed"
    # below Flash-Lite's smallest budget (512) there is no room: thinking is off
    gen, warnings = ask(LITE, reasoning_effort="low", max_tokens=600)
    assert gen["thinkingConfig"] == {"thinkingBudget": 0} and warnings[0].code == "thinking_off"
    # a caller's own budget is judged the same way
    gen, warnings = ask(
        OLD, max_tokens=1000, provider_options={"gemini": {"thinking_config": {"thinkingBudget": 1000}}}
    )
    assert gen["thinkingConfig"] == {"thinkingBudget": 500}
    # under the budget: untouched
    gen, warnings = ask(OLD, reasoning_effort="low", max_tokens=4000)
    assert gen["thinkingConfig"]["thinkingBudget"] == 2048 and not warnings


def test_a_callers_thinking_config_wins_over_reasoning_effort_with_a_warning():
    gen, warnings = ask(
        OLD, reasoning_effort="low", provider_options={"gemini": {"thinking_config": {"thinkingBudget": 4096}}}
    )
    assert gen["thinkingConfig"] == {"thinkingBudget": 4096}
    (warning,) = warnings
    assert warning.code == "reasoning_effort_overridden"
    assert "provider_options.gemini.thinking_config" in warning.message and "reasoning_effort low" in warning.message
    gen, warnings = ask(
        OLD,
        reasoning_effort="low",
        provider_options={"gemini": {"generation_config": {"thinkingConfig": {"thinkingBudget": 0}}}},
    )
    assert gen["thinkingConfig"] == {"thinkingBudget": 0}
    assert [w.code for w in warnings] == ["reasoning_effort_overridden"]


def test_sampling_rules_from_the_catalog():
    no_sampling = ModelInfo(id="gemini:m", provider="gemini", wire_name="m", rules=ModelRules(sampling=["top_p"]))
    wire, warnings, _ = body(
        Request(model="gemini:m", messages=[Message.user("x")], temperature=0.5, top_p=0.8), no_sampling
    )
    assert wire["generationConfig"] == {"topP": 0.8}
    assert "temperature" in warnings[0].message
    exclusive = ModelInfo(id="gemini:m", provider="gemini", wire_name="m", rules=ModelRules(sampling_exclusive=True))
    wire, warnings, _ = body(
        Request(model="gemini:m", messages=[Message.user("x")], temperature=0.5, top_p=0.8), exclusive
    )
    assert wire["generationConfig"] == {"temperature": 0.5} and "top_p" in warnings[0].message
    quiet = ModelInfo(
        id="gemini:m",
        provider="gemini",
        wire_name="m",
        thinking="budget",
        rules=ModelRules(sampling_needs_no_reasoning=True, default_max_tokens=1000),
    )
    wire, warnings, _ = body(
        Request(model="gemini:m", messages=[Message.user("x")], temperature=0.5, reasoning_effort="high"), quiet
    )
    assert "temperature" not in wire["generationConfig"]
    # the catalog's default limit is raised so the 24576-token budget leaves room for an answer
    assert wire["generationConfig"]["maxOutputTokens"] == 24576 + 1000


# ---------------------------------------------------------------------------
# provider_options.gemini


def test_built_in_tools_safety_settings_and_cached_content():
    request = Request(
        model=FLASH.id,
        messages=[Message.user("x")],
        tools=[Tool(name="f")],
        provider_options={
            "gemini": {
                "google_search": True,
                "code_execution": True,
                "url_context": True,
                "tools": [{"googleMaps": {}}],
                "safety_settings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
                "cachedContent": "cachedContents/abc",
                "generation_config": {"topK": 40},
                "thinking_config": {"thinkingBudget": -1},
            }
        },
    )
    wire, _, _ = body(request)
    assert wire["tools"] == [
        {"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object", "properties": {}}}]},
        {"googleSearch": {}},
        {"codeExecution": {}},
        {"urlContext": {}},
        {"googleMaps": {}},
    ]
    assert wire["safetySettings"] == [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]
    assert wire["cachedContent"] == "cachedContents/abc"
    assert wire["generationConfig"] == {"topK": 40, "thinkingConfig": {"thinkingBudget": -1}}


def test_json_object_output():
    wire, _, _ = body(
        Request(model=FLASH.id, messages=[Message.user("x")], response_format=ResponseFormat(kind="json_object"))
    )
    assert wire["generationConfig"] == {"responseMimeType": "application/json"}


# ---------------------------------------------------------------------------
# refusals


def test_a_result_whose_call_is_unknown_needs_a_name():
    with pytest.raises(ProviderError) as err:
        build(Request(model=FLASH.id, messages=[Message.user("x"), Message.tool_result("tu_x", "y")]), FLASH)
    assert err.value.error_class == "invalid_request" and "name" in err.value.message
    wire = build(
        Request(model=FLASH.id, messages=[Message.user("x"), Message.tool_result("tu_x", "y", name="f")]), FLASH
    ).body
    assert wire["contents"][0]["parts"][1]["functionResponse"] == {
        "name": "f",
        "response": {"result": "y"},
        "id": "tu_x",
    }


def test_inline_data_needs_a_media_type():
    with pytest.raises(ProviderError) as err:
        build(Request(model=FLASH.id, messages=[Message.user(ImagePart(data="AAA="))]), FLASH)
    assert err.value.error_class == "invalid_request" and "media_type" in err.value.message


def test_nothing_to_send():
    with pytest.raises(ProviderError) as err:
        build(Request(model=FLASH.id, messages=[Message.system("only a system prompt")]), FLASH)
    assert err.value.error_class == "invalid_request"
