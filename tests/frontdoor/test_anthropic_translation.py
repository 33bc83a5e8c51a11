"""Anthropic's Messages wire <-> the canonical form, both ways, on literal JSON.

The request side reads bodies into canonical requests for a given target (the
provider a model resolves to); the response side writes responses and streams,
which the official SDK's own types and its stream accumulator then read."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message as SdkMessage
from anthropic.types import RawMessageStreamEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from trunkline.frontdoor.anthropic_request import effort_for_budget, nearest_effort, to_request
from trunkline.frontdoor.anthropic_response import MessageStream, message_body, stop_reason
from trunkline.frontdoor.errors import HttpError
from trunkline.frontdoor.targets import UNKNOWN, Target, Targets
from trunkline.protocol.messages import (
    CacheControl,
    DocumentPart,
    ErrorInfo,
    Finish,
    FinishReason,
    ImagePart,
    Message,
    ModelInfo,
    ModelRules,
    ProviderPart,
    ProviderPartEvent,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    RedactedThinkingPart,
    Request,
    Response,
    ResponseFormat,
    StreamStart,
    TextDelta,
    TextEnd,
    TextPart,
    TextStart,
    ThinkingPart,
    Tool,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallPart,
    ToolCallStart,
    ToolChoice,
    ToolResultPart,
    Usage,
)

CLAUDE = Target(
    "anthropic",
    "anthropic",
    ModelInfo(id="anthropic:claude-sonnet-4-5", provider="anthropic", wire_name="claude-sonnet-4-5"),
)
GPT = Target(
    "openai",
    "openai",
    ModelInfo(
        id="openai:gpt-5",
        provider="openai",
        wire_name="gpt-5",
        rules=ModelRules(efforts=["minimal", "low", "medium", "high"]),
    ),
)
GEMINI = Target("gemini", "gemini", ModelInfo(id="gemini:g", provider="gemini", wire_name="g"))
OLLAMA = Target("ollama", "ollama", ModelInfo(id="ollama:l", provider="ollama", wire_name="l"))
MOCK = Target("mock", "mock", ModelInfo(id="mock:echo", provider="mock", wire_name="echo"))
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()


def body(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 256, "messages": list(messages) or [user("Hi")], **fields}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def refused(wire: dict[str, Any], target: Target = MOCK, **kwargs: Any) -> str:
    with pytest.raises(HttpError) as caught:
        to_request(wire, target, **kwargs)
    assert caught.value.info.error_class == "invalid_request"
    return caught.value.info.message


# -- request: the conversation ---------------------------------------------------------


def test_a_plain_body_is_a_canonical_request_with_its_settings():
    wire = body(
        user("Hello"),
        temperature=0.5,
        top_p=0.9,
        stop_sequences=["END"],
        metadata={"user_id": "u-42"},
        stream=True,
    )
    out = to_request(wire, MOCK)
    assert out.stream is True and out.model == "m"
    r = out.request
    assert r.messages == [Message(role="user", content=[TextPart(text="Hello")])]
    assert (r.max_tokens, r.temperature, r.top_p) == (256, 0.5, 0.9)
    assert r.stop_sequences == ["END"] and r.metadata == {"user_id": "u-42"}
    assert r.provider_options == {} and r.tools == [] and r.reasoning_effort is None


def test_the_system_prompt_as_a_string_or_as_blocks_with_their_breakpoints():
    assert to_request(body(system="Be brief."), MOCK).request.messages[0] == Message.system("Be brief.")
    blocks = [
        {"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        {"type": "text", "text": ""},
        {"type": "text", "text": "More."},
    ]
    system = to_request(body(system=blocks), MOCK).request.messages[0]
    assert system == Message(
        role="system",
        content=[TextPart(text="Rules.", cache_control=CacheControl(ttl="1h")), TextPart(text="More.")],
    )
    assert to_request(body(system=""), MOCK).request.messages[0].role == "user"


def test_user_blocks_text_images_and_documents_of_every_source():
    content = [
        {"type": "text", "text": "Look:", "cache_control": {"type": "ephemeral"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}, "title": "A"},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain words"}},
    ]
    (message,) = to_request(body(user(content)), MOCK).request.messages
    assert message.content == [
        TextPart(text="Look:", cache_control=CacheControl()),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/cat.png"),
        DocumentPart(data="JVBERi0=", media_type="application/pdf"),
        DocumentPart(url="https://example.com/a.pdf", name="A"),
        DocumentPart(data=base64.b64encode(b"plain words").decode(), media_type="text/plain"),
    ]


def test_a_tool_loop_results_travel_in_a_tool_message_before_the_users_words():
    wire = body(
        user("Weather in Paris and Rome?"),
        assistant(
            [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "tu_2", "name": "weather", "input": {"city": "Rome"}},
            ]
        ),
        user(
            [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": "18C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "tu_2",
                    "content": [
                        {"type": "text", "text": "no data"},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/map.png"}},
                    ],
                    "is_error": True,
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": "Thanks."},
            ]
        ),
    )
    messages = to_request(wire, MOCK).request.messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[1].content == [
        TextPart(text="Checking."),
        ToolCallPart(id="tu_1", name="weather", arguments={"city": "Paris"}),
        ToolCallPart(id="tu_2", name="weather", arguments={"city": "Rome"}),
    ]
    assert messages[2].content == [
        ToolResultPart(tool_call_id="tu_1", content="18C"),
        ToolResultPart(
            tool_call_id="tu_2",
            content=[TextPart(text="no data"), ImagePart(url="https://example.com/map.png")],
            is_error=True,
            cache_control=CacheControl(),
        ),
    ]
    assert messages[3] == Message.user("Thanks.")


def test_thinking_comes_back_as_the_serving_providers_own_and_server_blocks_stay_opaque():
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
    found = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"type": "x"}]}
    wire = body(
        user("Q"),
        assistant(
            [
                {"type": "thinking", "thinking": "Let me see.", "signature": "EqQBCkYIBRgCKkA+sig=="},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
                search,
                found,
                {"type": "text", "text": "A."},
            ]
        ),
        user("And?"),
    )
    content = to_request(wire, CLAUDE).request.messages[1].content
    assert content == [
        ThinkingPart(
            text="Let me see.", signature="EqQBCkYIBRgCKkA+sig==", provider="anthropic", model="claude-sonnet-4-5"
        ),
        RedactedThinkingPart(data="EmwKAhgBEgy3va3pzix/LafPsn4aDFIT", provider="anthropic", model="claude-sonnet-4-5"),
        ProviderPart(api="anthropic", kind="server_tool_use", data=search),
        ProviderPart(api="anthropic", kind="web_search_tool_result", data=found),
        TextPart(text="A."),
    ]


# -- request: tools, thinking and the rest, per provider ---------------------------------

WEATHER = {
    "name": "weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


def test_custom_tools_and_each_tool_choice():
    wire = body(tools=[{**WEATHER, "cache_control": {"type": "ephemeral"}, "strict": True}])
    request = to_request({**wire, "tool_choice": {"type": "auto"}}, MOCK).request
    assert request.tools == [
        Tool(
            name="weather",
            description="Weather in a city",
            parameters=WEATHER["input_schema"],
            strict=True,
            cache_control=CacheControl(),
        )
    ]
    choices = {
        "auto": ToolChoice(mode="auto"),
        "any": ToolChoice(mode="required"),
        "none": ToolChoice(mode="none"),
    }
    for kind, expected in choices.items():
        assert to_request({**wire, "tool_choice": {"type": kind}}, MOCK).request.tool_choice == expected
    named = to_request({**wire, "tool_choice": {"type": "tool", "name": "weather"}}, MOCK).request
    assert named.tool_choice == ToolChoice(mode="tool", name="weather")
    assert "names the tool" in refused({**wire, "tool_choice": {"type": "tool"}})


def test_server_tools_go_to_anthropic_as_sent_and_are_refused_elsewhere():
    tools = [WEATHER, SEARCH]
    out = to_request(body(tools=tools), CLAUDE).request
    assert [t.name for t in out.tools] == ["weather"]  # the daemon still checks the custom ones
    assert out.provider_options == {"anthropic": {"extra_body": {"tools": tools, "tool_choice": {"type": "auto"}}}}
    message = refused(body(tools=tools), GPT)
    assert "tools.1: `web_search_20250305` is an Anthropic server tool" in message and "openai:gpt-5" in message
    # Anthropic-only fields of a custom tool: as sent to Anthropic, without effect elsewhere.
    deferred = [{**WEATHER, "defer_loading": True}]
    assert to_request(body(tools=deferred), CLAUDE).request.provider_options["anthropic"]["extra_body"]["tools"] == (
        deferred
    )
    assert to_request(body(tools=deferred), GPT).request.provider_options == {}


def test_one_tool_call_at_a_time_is_said_in_each_providers_words():
    wire = body(tools=[WEATHER], tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert to_request(wire, CLAUDE).request.provider_options == {
        "anthropic": {"extra_body": {"tool_choice": {"type": "any", "disable_parallel_tool_use": True}}}
    }
    assert to_request(wire, GPT).request.provider_options == {"openai": {"parallel_tool_calls": False}}
    assert "one tool call at a time" in refused(wire, GEMINI)


def test_thinking_goes_to_anthropic_as_given_and_becomes_an_effort_elsewhere():
    enabled = {"type": "enabled", "budget_tokens": 3000}
    out = to_request(body(thinking=enabled), CLAUDE).request
    assert out.provider_options == {"anthropic": {"thinking": enabled}} and out.reasoning_effort is None
    assert to_request(body(thinking=enabled), GPT).request.reasoning_effort == "medium"
    # gpt-5 here takes minimal..high: `max` moves to the nearest it takes, `none` is left out.
    assert to_request(body(thinking={"type": "enabled", "budget_tokens": 60000}), GPT).request.reasoning_effort == (
        "high"
    )
    assert to_request(body(thinking={"type": "disabled"}), GPT).request.reasoning_effort is None
    assert to_request(body(thinking={"type": "disabled"}), GEMINI).request.reasoning_effort == "none"
    assert to_request(body(thinking={"type": "adaptive"}), GEMINI).request.reasoning_effort is None
    # A thinking type newer than the options' schema goes to Anthropic unchecked.
    newer = {"type": "between_tools"}
    assert to_request(body(thinking=newer), CLAUDE).request.provider_options == {
        "anthropic": {"extra_body": {"thinking": newer}}
    }


def test_the_effort_ladder():
    assert [effort_for_budget(b) for b in (1024, 1025, 2048, 8000, 24576, 32768, 32769)] == [
        "minimal",
        "low",
        "low",
        "medium",
        "high",
        "xhigh",
        "max",
    ]
    assert nearest_effort("xhigh", GPT) == "high" and nearest_effort("low", GPT) == "low"
    assert nearest_effort("max", UNKNOWN) == "max"


def test_output_config_goes_to_anthropic_as_given_and_is_a_response_format_elsewhere():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    config = {"effort": "high", "format": {"type": "json_schema", "schema": schema}}
    assert to_request(body(output_config=config), CLAUDE).request.provider_options == {
        "anthropic": {"output_config": config}
    }
    out = to_request(body(output_config=config), GPT).request
    assert out.response_format == ResponseFormat(kind="json_schema", schema=schema)
    assert out.reasoning_effort == "high"
    assert "json_schema" in refused(body(output_config={"format": {"type": "json_object"}}), GPT)


def test_top_k_goes_to_each_providers_own_option():
    wire = body(top_k=5)
    assert to_request(wire, CLAUDE).request.provider_options == {"anthropic": {"top_k": 5}}
    assert to_request(wire, GEMINI).request.provider_options == {"gemini": {"generation_config": {"topK": 5}}}
    assert to_request(wire, OLLAMA).request.provider_options == {"ollama": {"options": {"top_k": 5}}}
    assert "has no top_k" in refused(wire, GPT)


def test_anthropics_own_fields_and_headers_reach_an_anthropic_provider():
    mcp = [{"type": "url", "url": "https://mcp.example.com/mcp", "name": "x"}]
    wire = body(
        mcp_servers=mcp,
        container="container_1",
        service_tier="auto",
        cache_control={"type": "ephemeral", "ttl": "5m"},
        speed="fast",
        some_new_field={"a": 1},
        provider_options={"anthropic": {"beta_headers": "given-2025-01-01"}},
    )
    options = to_request(wire, CLAUDE, beta=["mcp-client-2025-04-04", "given-2025-01-01"]).request.provider_options
    assert options == {
        "anthropic": {
            "beta_headers": ["given-2025-01-01", "mcp-client-2025-04-04"],
            "mcp_servers": mcp,
            "container": "container_1",
            "service_tier": "auto",
            "cache_control": {"type": "ephemeral", "ttl": "5m"},
            "auto_cache": False,  # the client chose Anthropic's own automatic caching
            "extra_body": {"speed": "fast", "some_new_field": {"a": 1}},
        }
    }


def test_an_instance_named_otherwise_gets_the_options_under_the_name_its_worker_reads():
    work = Target("work", "anthropic", ModelInfo(id="work:claude-x", provider="work", wire_name="claude-x"))
    assert to_request(body(top_k=3), work).request.provider_options == {"work": {"top_k": 3}}
    by_type = body(top_k=3, provider_options={"anthropic": {"top_p": 1}})
    assert to_request(by_type, work).request.provider_options == {"anthropic": {"top_p": 1, "top_k": 3}}


def test_anthropics_features_elsewhere_are_refused_or_without_effect():
    for name in ("mcp_servers", "container", "context_management", "inference_geo"):
        assert f"`{name}` is an Anthropic feature" in refused(body(**{name: {}}), GPT)
    assert "`frobnicate` is not a Messages API field" in refused(body(frobnicate=1), GPT)
    hints = body(cache_control={"type": "ephemeral"}, service_tier="auto", speed="fast", diagnostics={})
    assert to_request(hints, GPT, beta=["x-2025"]).request.provider_options == {}
    # A model the door cannot place: the daemon says what is wrong with it.
    assert to_request(body(frobnicate=1, tools=[SEARCH]), UNKNOWN).request.tools == []


def test_the_catalog_places_a_model_as_the_daemon_does():
    targets = Targets()
    assert targets.resolve("anthropic:claude-x") == UNKNOWN  # nothing read yet
    claude = ModelInfo(id="anthropic:claude-sonnet-4-5", provider="anthropic", wire_name="claude-sonnet-4-5")
    claude.aliases = ["sonnet"]
    targets.load([claude], {"anthropic": "anthropic", "mock": "mock"})
    for name in ("sonnet", "claude-sonnet-4-5", "anthropic:claude-sonnet-4-5"):
        placed = targets.resolve(name)
        assert (placed.provider, placed.provider_type, placed.wire_name) == ("anthropic", "anthropic", claude.wire_name)
    assert targets.resolve("anthropic:claude-next").wire_name == "claude-next"  # passed through, as the daemon does
    assert targets.resolve("mock:echo").provider_type == "mock"
    assert targets.resolve("nobody:x") == UNKNOWN and targets.resolve("gpt-nothing") == UNKNOWN


def test_count_tokens_needs_no_max_tokens():
    wire = {"model": "m", "messages": [user("Hi")]}
    assert to_request(wire, MOCK, count=True).request.max_tokens is None
    assert "max_tokens" in refused(wire)


@pytest.mark.parametrize(
    ("wire", "says"),
    [
        ([], "must be a JSON object"),
        ({"model": "m", "max_tokens": "many", "messages": [user("x")]}, "max_tokens: Expected `int | null`, got `str`"),
        (body(user([{"type": "text", "text": 3}])), "messages.0.content.0.text: Expected `str`, got `int`"),
        (body({"role": "system", "content": "x"}), "messages.0.role"),
        (body(messages=[]), "at least one message"),
        (body(user([{"type": "image", "source": {"type": "file", "file_id": "f"}}])), "Files API"),
        (body(user([{"type": "search_result", "source": "s", "title": "t", "content": []}])), "search_result"),
        (
            body(user([{"type": "document", "source": {"type": "url", "url": "u"}, "citations": {"enabled": True}}])),
            "citations",
        ),
        (body(user("x"), assistant([{"type": "image", "source": {"type": "url", "url": "u"}}])), "cannot hold image"),
        (body(user([{"type": "text", "text": "x", "cache_control": {"type": "forever"}}])), "cache_control.type"),
        (body(metadata={"user_id": "u", "org": "o"}), "metadata.org"),
        (body(system=[{"type": "image"}]), "system.0.type"),
    ],
)
def test_what_cannot_be_read_is_refused_with_the_place(wire: Any, says: str):
    assert says in refused(wire)


# -- response: whole -------------------------------------------------------------------


def full_response() -> Response:
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
    return Response(
        id="msg_01abc",
        model="claude-sonnet-4-5",
        message=Message.assistant(
            ThinkingPart(text="Hmm.", signature="sig+/=="),
            RedactedThinkingPart(data="opaque=="),
            ProviderPart(api="anthropic", kind="server_tool_use", data=search),
            TextPart(text="Calling."),
            ToolCallPart(id="tu_01", name="weather", arguments={"city": "Paris"}, provider_id="toolu_x"),
            ProviderPart(api="openai", kind="reasoning", data={"id": "rs_1"}),
            ProviderPart(api="anthropic", kind="container", data={"id": "c_1", "expires_at": "2030-01-01T00:00:00Z"}),
        ),
        finish_reason=FinishReason(reason="tool_calls", raw="tool_use"),
        usage=Usage(
            input_tokens=1000,
            output_tokens=50,
            cache_read_tokens=600,
            cache_write_tokens=300,
            cache_write_long_tokens=100,
        ),
    )


def test_a_whole_response_is_a_message_the_sdk_reads():
    out = message_body(full_response(), "claude-sonnet-4-5")
    assert out == {
        "id": "msg_01abc",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "Hmm.", "signature": "sig+/=="},
            {"type": "redacted_thinking", "data": "opaque=="},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "tu_01", "name": "weather", "input": {"city": "Paris"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 100,
            "output_tokens": 50,
            "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 600,
            "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 100},
        },
        "container": {"id": "c_1", "expires_at": "2030-01-01T00:00:00Z"},
    }
    message = SdkMessage.model_validate(out)
    assert message.content[1].type == "redacted_thinking" and message.container is not None


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        (FinishReason(reason="stop", raw="end_turn"), "end_turn"),
        (FinishReason(reason="stop", raw="pause_turn"), "pause_turn"),
        (FinishReason(reason="stop", raw="stop_sequence", stop_sequence="END"), "stop_sequence"),
        (FinishReason(reason="stop", raw="STOP", stop_sequence="END"), "stop_sequence"),
        (FinishReason(reason="stop", raw="completed"), "end_turn"),
        (FinishReason(reason="length", raw="max_output_tokens"), "max_tokens"),
        (FinishReason(reason="tool_calls", raw="function_call"), "tool_use"),
        (FinishReason(reason="content_filter", raw="SAFETY"), "refusal"),
        (FinishReason(reason="other", raw=None), "end_turn"),
    ],
)
def test_stop_reasons(finish: FinishReason, expected: str):
    assert stop_reason(finish) == expected


# -- response: streamed ------------------------------------------------------------------


def sse_events(chunks: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of server-sent events, every one named."""
    out = []
    for block in b"".join(chunks).split(b"\n\n"):
        if not block:
            continue
        name, data = block.split(b"\n")
        assert name.startswith(b"event: ") and data.startswith(b"data: ")
        out.append((name[7:].decode(), json.loads(data[6:])))
    return out


def stream_of(response: Response) -> list[Any]:
    """The canonical events a worker sends for `full_response()`, as the emitter numbers them."""
    return [
        StreamStart(model="claude-sonnet-4-5", provider="anthropic"),
        ReasoningStart(index=0),
        ReasoningDelta(index=0, text="Hm"),
        ReasoningDelta(index=0, text="m."),
        ReasoningEnd(index=0, text="Hmm.", signature="sig+/=="),
        ReasoningStart(index=1),
        ReasoningEnd(index=1, redacted_data="opaque=="),
        ProviderPartEvent(index=2, api="anthropic", kind="server_tool_use", data=response.message.content[2].data),
        TextStart(index=3),
        TextDelta(index=3, text="Call"),
        TextDelta(index=3, text="ing."),
        TextEnd(index=3, text="Calling."),
        ToolCallStart(index=4, id="tu_01", name="weather"),
        ToolCallDelta(index=4, id="tu_01", partial_json='{"city": '),
        ToolCallDelta(index=4, id="tu_01", partial_json='"Paris"}'),
        ToolCallEnd(index=4, id="tu_01", name="weather", arguments={"city": "Paris"}),
        ProviderPartEvent(index=5, api="openai", kind="reasoning", data={"id": "rs_1"}),
        ProviderPartEvent(index=6, api="anthropic", kind="container", data=response.message.content[6].data),
        Finish(response=response),
    ]


def test_a_stream_is_anthropics_event_sequence_and_adds_up_to_the_whole_message():
    response = full_response()
    stream = MessageStream("claude-sonnet-4-5")
    chunks = [b for ev in stream_of(response) for b in stream.events(ev)] + stream.end()
    events = sse_events(chunks)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    assert [(n, d.get("index")) for n, d in events if n.startswith("content_block")] == [
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),  # the signature
        ("content_block_stop", 0),
        ("content_block_start", 1),  # redacted: whole in its start
        ("content_block_stop", 1),
        ("content_block_start", 2),
        ("content_block_stop", 2),
        ("content_block_start", 3),
        ("content_block_delta", 3),
        ("content_block_delta", 3),
        ("content_block_stop", 3),
        ("content_block_start", 4),
        ("content_block_delta", 4),
        ("content_block_delta", 4),
        ("content_block_stop", 4),
    ]
    assert events[5][1]["delta"] == {"type": "signature_delta", "signature": "sig+/=="}
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "container": {"id": "c_1", "expires_at": "2030-01-01T00:00:00Z"},
        },
        "usage": message_body(response, "x")["usage"],
    }
    # The SDK's own accumulator (it checks the order) builds the same message as the whole form.
    snapshot = None
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    json_bufs: dict[int, bytes] = {}
    for _, data in events:
        if data["type"] != "ping":
            event = adapter.validate_python(data)
            snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
    assert snapshot is not None
    whole = message_body(response, "claude-sonnet-4-5")
    built = snapshot.to_dict(mode="json")
    assert built["content"] == whole["content"]
    # message_delta has no place for the cache writes' split by lifetime; the totals all arrive.
    assert built["usage"] == {k: v for k, v in whole["usage"].items() if k != "cache_creation"}
    assert built["stop_reason"] == "tool_use" and built["container"] == whole["container"]


def test_arguments_given_whole_go_as_one_delta():
    stream = MessageStream("m")
    out: list[bytes] = []
    for ev in (
        StreamStart(),
        ToolCallStart(index=0, id="tu_1", name="f"),
        ToolCallEnd(index=0, id="tu_1", name="f", arguments={"a": 1}, raw_arguments='{"a": 1}'),
    ):
        out += stream.events(ev)
    deltas = [d["delta"] for n, d in sse_events(out) if n == "content_block_delta"]
    assert deltas == [{"type": "input_json_delta", "partial_json": '{"a": 1}'}]


def test_deltas_carry_any_text_as_json():
    stream = MessageStream("m")
    text = 'say "hi"\n\\ then é, 🙂 and </script>'
    out: list[bytes] = []
    for ev in (StreamStart(), TextStart(index=0), TextDelta(index=0, text=text), TextDelta(index=0, text="")):
        out += stream.events(ev)
    deltas = [d for n, d in sse_events(out) if n == "content_block_delta"]
    assert deltas == [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}]


def test_an_error_once_streaming_is_anthropics_error_event():
    stream = MessageStream("m")
    stream.events(StreamStart())
    overloaded = ErrorInfo(error_class="rate_limit", message="Overloaded", provider_code="overloaded_error")
    ((name, data),) = sse_events(stream.error(overloaded, 529))
    assert name == "error"
    assert data == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_nothing_but_an_error_is_plain():
    info = ErrorInfo(error_class="invalid_request", message="bad")
    ((name, data),) = sse_events(MessageStream("m").error(info, 400))
    assert (name, data["error"]["type"]) == ("error", "invalid_request_error")


def test_request_translation_encodes_for_the_daemon():
    """What the door sends is a valid protocol message (the daemon decodes it as typed)."""
    wire = body(
        user([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]),
        tools=[WEATHER, SEARCH],
        thinking={"type": "enabled", "budget_tokens": 2048},
    )
    request = to_request(wire, CLAUDE, beta=["b-1"]).request
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(request), type=Request)
    assert again == request


# -- any body: an answer or a refusal, never a crash ---------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
BLOCK_TYPES = [
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "search_result",
]
BLOCK = st.builds(
    lambda kind, fields, extra: {"type": kind, **fields, **extra},
    st.sampled_from(BLOCK_TYPES),
    st.fixed_dictionaries(
        {},
        optional={
            "text": JSON,
            "source": st.fixed_dictionaries(
                {"type": st.sampled_from(["base64", "url", "text", "file"])},
                optional={"data": JSON, "url": JSON, "media_type": JSON, "path": JSON},
            ),
            "id": JSON,
            "name": JSON,
            "input": JSON,
            "tool_use_id": JSON,
            "content": JSON
            | st.lists(
                st.fixed_dictionaries(
                    {"type": st.sampled_from(["text", "image", "document"])}, optional={"text": JSON}
                ),
                max_size=2,
            ),
            "thinking": JSON,
            "signature": JSON,
            "data": JSON,
            "cache_control": JSON,
        },
    ),
    st.dictionaries(st.text(max_size=5), JSON, max_size=1),
)
MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system"]),
        "content": st.text(max_size=5) | st.lists(BLOCK, max_size=3) | JSON,
    }
)
BODY = st.fixed_dictionaries(
    {"model": st.sampled_from(["m", ""]) | JSON, "messages": st.lists(MESSAGE, max_size=3) | JSON},
    optional=dict.fromkeys(
        [
            *("max_tokens", "system", "metadata", "stop_sequences", "stream", "temperature", "top_p", "top_k"),
            *("tools", "tool_choice", "thinking", "output_config", "provider_options", "cache_control"),
            *("container", "mcp_servers", "speed", "unknown_field"),
        ],
        JSON,
    ),
)


@settings(max_examples=200, deadline=None)
@given(BODY, st.sampled_from([CLAUDE, GPT, GEMINI, OLLAMA, MOCK, UNKNOWN]))
def test_any_body_is_a_request_or_a_refusal_never_a_crash(wire: dict[str, Any], target: Target):
    refusal: HttpError | None = None
    try:
        request = to_request(wire, target).request
    except HttpError as exc:
        refusal = exc
    if refusal is not None:
        assert refusal.info.error_class == "invalid_request" and refusal.info.message
        return
    # What the door sends decodes as the daemon reads it, and never names a file.
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(request), type=Request)
    assert again == request
    assert all(getattr(p, "path", None) is None for m in request.messages for p in m.content)
