"""The Responses door's pure translations, on literal wire JSON, both ways: request bodies to
canonical requests, canonical responses and events to response objects and event streams (each
checked against the `openai` SDK's own types and stream helper), and reasoning sealed into a
reasoning item and opened again as the same parts."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import openai
import pydantic
import pytest
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import Response as SdkResponse
from openai.types.responses import ResponseStreamEvent

from trunkline.frontdoor import openai_responses_carrier as carrier
from trunkline.frontdoor.errors import HttpError, status_of
from trunkline.frontdoor.openai_responses_output import whole
from trunkline.frontdoor.openai_responses_request import translate
from trunkline.frontdoor.openai_responses_stream import ResponsesStream
from trunkline.protocol.messages import (
    ErrorInfo,
    Finish,
    FinishReason,
    Message,
    ProviderPart,
    ProviderPartEvent,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    RedactedThinkingPart,
    Response,
    StreamStart,
    TextDelta,
    TextEnd,
    TextPart,
    TextStart,
    ThinkingPart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallPart,
    ToolCallStart,
    Usage,
)

PNG = "iVBORw0KGgo="
OPENAI_REASONING = {
    "type": "reasoning",
    "id": "rs_abc",
    "summary": [{"type": "summary_text", "text": "Thinking it over."}],
    "encrypted_content": "gAAAAB-openai-own",
}

sdk_event = pydantic.TypeAdapter(ResponseStreamEvent)


def canonical(body: dict[str, Any]) -> dict[str, Any]:
    return msgspec.to_builtins(translate(body).request)


# -- request bodies -> canonical requests ----------------------------------------------------


def test_a_string_input_is_one_user_message():
    assert canonical({"model": "mock:echo", "input": "hello"}) == {
        "model": "mock:echo",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    }


def test_a_full_body_becomes_the_canonical_request():
    body = {
        "model": "openai:gpt-5",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "Describe these."},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "low"},
                    {"type": "input_image", "image_url": "https://example.com/cat.png"},
                    {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERg==", "filename": "a.pdf"},
                    {"type": "input_file", "file_url": "https://example.com/b.pdf"},
                ],
            },
            {"role": "developer", "content": "Use metric units."},
            OPENAI_REASONING,
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
            {
                "type": "message",
                "role": "assistant",
                "phase": "commentary",
                "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}],
            },
            {"type": "function_call", "call_id": "tu_1", "name": "lookup", "arguments": '{"q": "cats"}'},
            {"type": "function_call_output", "call_id": "tu_1", "output": "two cats"},
            {
                "type": "function_call_output",
                "call_id": "tu_1",
                "output": [
                    {"type": "input_text", "text": "and a dog"},
                    {"type": "input_image", "image_url": "https://example.com/dog.png"},
                ],
            },
        ],
        "tools": [
            {
                "type": "function",
                "name": "lookup",
                "description": "Look up.",
                "parameters": {"type": "object"},
                "strict": True,
            }
        ],
        "tool_choice": {"type": "function", "name": "lookup"},
        "parallel_tool_calls": False,
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": True}},
        "max_output_tokens": 500,
        "temperature": 0.5,
        "top_p": 0.9,
        "reasoning": {"effort": "high", "summary": "detailed"},
        "metadata": {"ticket": "T-1"},
        "store": True,
        "include": ["reasoning.encrypted_content"],
        "service_tier": "flex",
        "prompt_cache_key": "tenant-1",
        "previous_response_id": None,
        "provider_options": {"openai": {"service_tier": "priority"}, "mock": {"model": "m"}},
    }
    assert canonical(body) == {
        "model": "openai:gpt-5",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {"role": "user", "content": [{"type": "text", "text": "Describe these."}]},
            {
                "role": "user",
                "content": [
                    {"type": "image", "data": PNG, "media_type": "image/png", "detail": "low"},
                    {"type": "image", "url": "https://example.com/cat.png"},
                    {"type": "document", "data": "JVBERg==", "media_type": "application/pdf", "name": "a.pdf"},
                    {"type": "document", "url": "https://example.com/b.pdf"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "text": "Thinking it over."},
                    {"type": "provider_part", "api": "openai", "kind": "reasoning", "data": OPENAI_REASONING},
                    {
                        "type": "provider_part",
                        "api": "openai",
                        "kind": "web_search_call",
                        "data": {
                            "type": "web_search_call",
                            "id": "ws_1",
                            "status": "completed",
                            "action": {"type": "search"},
                        },
                    },
                    {
                        "type": "provider_part",
                        "api": "openai",
                        "kind": "message",
                        "data": {"type": "message", "phase": "commentary"},
                    },
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_call", "id": "tu_1", "name": "lookup", "arguments": {"q": "cats"}},
                ],
            },
            {"role": "tool", "content": [{"type": "tool_result", "tool_call_id": "tu_1", "content": "two cats"}]},
            {
                "role": "tool",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_call_id": "tu_1",
                        "content": [
                            {"type": "text", "text": "and a dog"},
                            {"type": "image", "url": "https://example.com/dog.png"},
                        ],
                    }
                ],
            },
        ],
        "tools": [{"name": "lookup", "description": "Look up.", "parameters": {"type": "object"}, "strict": True}],
        "tool_choice": {"mode": "tool", "name": "lookup"},
        "response_format": {"kind": "json_schema", "schema": {"type": "object"}, "name": "answer", "strict": True},
        "temperature": 0.5,
        "top_p": 0.9,
        "max_tokens": 500,
        "reasoning_effort": "high",
        "metadata": {"ticket": "T-1"},
        "provider_options": {
            "openai": {
                "parallel_tool_calls": False,
                "reasoning_summary": "detailed",
                "service_tier": "priority",  # the client's own provider options win
                "prompt_cache_key": "tenant-1",
            },
            "mock": {"model": "m"},
        },
    }


def test_allowed_tools_narrow_the_tools_and_verbosity_carries_the_text_as_given():
    text = {"format": {"type": "text"}, "verbosity": "low"}
    request = translate(
        {
            "model": "m",
            "input": "x",
            "tools": [{"type": "function", "name": "a"}, {"type": "function", "name": "b"}],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "b"}]},
            "text": text,
            "background": True,
            "stream": True,
        }
    ).request
    assert [t.name for t in request.tools] == ["b"] and request.tool_choice is not None
    assert request.tool_choice.mode == "required"
    assert request.response_format is None
    assert request.provider_options == {"openai": {"text": text, "background": True}}


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ([], None, "must be a JSON object"),
        ({"input": "x"}, None, "missing required field `model`"),
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id", "send the whole"),
        ({"model": "m", "input": "x", "conversation": "conv_1"}, "conversation", "stores nothing"),
        ({"model": "m", "input": "x", "prompt": {"id": "pmpt_1"}}, "prompt", "stores nothing"),
        ({"model": "m", "input": "x", "modalities": ["text"]}, "modalities", "provider_options.openai.extra_body"),
        ({"model": "m", "input": "x", "max_output_tokens": "9"}, "max_output_tokens", "Expected `int | null`"),
        (
            {"model": "m", "input": "x", "reasoning": {"effort": "huge"}},
            "reasoning.effort",
            "Invalid enum value 'huge'",
        ),
        ({"model": "m", "input": "x", "reasoning": {"context": "all_turns"}}, "reasoning", "unknown field `context`"),
        ({"model": "m", "input": "x", "text": {"format": {"type": "grammar"}}}, "text.format.type", "Invalid value"),
        ({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0]", "provider_options.openai.tools"),
        ({"model": "m", "input": "x", "tool_choice": {"type": "mcp"}}, "tool_choice", "tool_choice must be"),
        ({"model": "m", "input": "x", "include": ["message.output_text.logprobs"]}, "include", "no log probabilities"),
        ({"model": "m", "input": "x", "top_logprobs": 3}, "top_logprobs", "no log probabilities"),
        ({"model": "m", "input": "x", "background": True}, "background", "stream it instead"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", "send the item itself"),
        ({"model": "m", "input": [{"role": "critic", "content": "x"}]}, "input[0].role", "must be one of"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "input[0].content[0]",
            "not taken",
        ),
        (
            {
                "model": "m",
                "input": [
                    {"role": "user", "content": [{"type": "input_image", "file_id": "file_1", "detail": "auto"}]}
                ],
            },
            "input[0].content[0].file_id",
            "send the image as image_url",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]},
            "input[0].content[0].file_id",
            "file_data",
        ),
        (
            {
                "model": "m",
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "c",
                        "output": [{"type": "input_file", "file_url": "https://x/y.pdf"}],
                    }
                ],
            },
            "input[0].output[0]",
            "text and images, not files",
        ),
        (
            {"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input[0].call_id",
            "must be a string",
        ),
    ],
)
def test_what_cannot_be_carried_is_refused_with_a_sentence(body: Any, param: str | None, words: str):
    with pytest.raises(HttpError) as refused:
        translate(body)
    assert refused.value.info.error_class == "invalid_request" and refused.value.status is None
    assert refused.value.param == param
    assert words in refused.value.info.message


# -- canonical responses -> response objects ----------------------------------------------------


def _normalised(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items with their ids replaced by their kind and position (ids are minted per response)."""
    return [{**item, "id": f"{item['type']}-{i}"} for i, item in enumerate(items)]


SIGNED = ThinkingPart(text="Let me think.", signature="sig-1", provider="anthropic", model="claude-x")
GEMINI_SIGNATURE = ProviderPart(api="gemini", kind="thoughtSignature", data="U0lH", model="gemini-3", provider="gemini")


def test_a_whole_response_object():
    response = Response(
        id="msg_1",
        model="claude-x",
        message=Message(
            role="assistant",
            content=[
                SIGNED,
                TextPart(text="Checking."),
                ToolCallPart(id="tu_1", name="lookup", arguments={"q": "cats"}, provider_id="toolu_1"),
                GEMINI_SIGNATURE,
            ],
        ),
        finish_reason=FinishReason(reason="tool_calls", raw="tool_use"),
        usage=Usage(
            input_tokens=100, output_tokens=20, reasoning_tokens=5, cache_read_tokens=60, cache_write_tokens=10
        ),
    )
    echo = translate({"model": "anthropic:claude-x", "input": "x", "metadata": {"a": "b"}}).echo
    body = whole(response, echo, "anthropic:claude-x")
    SdkResponse.model_validate(body)  # the SDK's own type holds it
    assert body["id"].startswith("resp_") and body["object"] == "response" and body["status"] == "completed"
    assert body["model"] == "anthropic:claude-x" and body["metadata"] == {"a": "b"}
    assert body["usage"] == {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 10},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 5},
        "total_tokens": 120,
    }
    assert _normalised(body["output"]) == [
        {
            "id": "reasoning-0",
            "type": "reasoning",
            "status": "completed",
            "summary": [{"type": "summary_text", "text": "Let me think."}],
            "encrypted_content": carrier.seal([SIGNED]),
        },
        {
            "id": "message-1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}],
        },
        {
            "id": "function_call-2",
            "type": "function_call",
            "status": "completed",
            "call_id": "tu_1",
            "name": "lookup",
            "arguments": '{"q":"cats"}',
        },
        {
            "id": "reasoning-3",
            "type": "reasoning",
            "status": "completed",
            "summary": [],
            "encrypted_content": carrier.seal([GEMINI_SIGNATURE]),
        },
    ]


@pytest.mark.parametrize(
    ("reason", "status", "details"),
    [
        ("length", "incomplete", {"reason": "max_output_tokens"}),
        ("content_filter", "incomplete", {"reason": "content_filter"}),
        ("stop", "completed", None),
        ("other", "completed", None),
        ("cancelled", "cancelled", None),
        ("error", "failed", None),
    ],
)
def test_the_finish_reason_is_the_status(reason: str, status: str, details: Any):
    response = msgspec.convert(
        {
            "message": {"role": "assistant", "content": [{"type": "text", "text": "cut"}]},
            "finish_reason": {"reason": reason},
        },
        Response,
    )
    body = whole(response, translate({"model": "m", "input": "x"}).echo, "m")
    SdkResponse.model_validate(body)
    assert (body["status"], body["incomplete_details"]) == (status, details)
    assert (body["error"] is not None) == (status == "failed")


# -- reasoning carried to the next turn -------------------------------------------------------------


def test_reasoning_goes_back_as_the_parts_it_came_as():
    """Every kind of part a provider needs back, out as reasoning items and in again unchanged."""
    openai_item = ProviderPart(api="openai", kind="reasoning", data=OPENAI_REASONING, model="gpt-5", provider="openai")
    content = [
        ThinkingPart(text="First, the summary.", provider="openai", model="gpt-5"),
        openai_item,
        TextPart(text="Answer."),
        ThinkingPart(text="Signed.", signature="sig", provider="anthropic", model="claude-x"),
        RedactedThinkingPart(data="opaque==", provider="anthropic", model="claude-x"),
        ToolCallPart(id="tu_9", name="f", arguments={}),
        GEMINI_SIGNATURE,
    ]
    body = whole(Response(message=Message(role="assistant", content=content)), {}, "m")
    items = json.loads(json.dumps(body["output"]))  # what a client keeps: plain JSON
    assert [i["type"] for i in items] == ["reasoning", "message", "reasoning", "function_call", "reasoning"]
    assert [s["text"] for s in items[2]["summary"]] == ["Signed.", ""]
    back = translate({"model": "m", "input": [{"role": "user", "content": "q"}, *items]}).request
    assert back.messages[1].content == [
        ThinkingPart(text="First, the summary.", provider="openai", model="gpt-5"),
        openai_item,
        TextPart(text="Answer."),
        ThinkingPart(text="Signed.", signature="sig", provider="anthropic", model="claude-x"),
        RedactedThinkingPart(data="opaque==", provider="anthropic", model="claude-x"),
        ToolCallPart(id="tu_9", name="f", arguments={}),
        GEMINI_SIGNATURE,
    ]


def test_plain_reasoning_goes_as_summaries_only_and_comes_back_as_text():
    body = whole(
        Response(message=Message(role="assistant", content=[ThinkingPart(text="hmm"), TextPart(text="ok")])), {}, "m"
    )
    reasoning = body["output"][0]
    assert "encrypted_content" not in reasoning and reasoning["summary"] == [{"type": "summary_text", "text": "hmm"}]
    back = translate({"model": "m", "input": [{"role": "user", "content": "q"}, *body["output"]]}).request
    assert back.messages[1].content == [ThinkingPart(text="hmm"), TextPart(text="ok")]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda item: item.update(encrypted_content=item["encrypted_content"][:-6]), "not what the front door wrote"),
        (lambda item: item.update(encrypted_content=carrier.PREFIX + "!!!"), "not what the front door wrote"),
        (lambda item: item.update(summary=[]), "carries 1 reasoning parts, but the item has 0 summaries"),
    ],
)
def test_a_changed_reasoning_item_is_refused(change: Any, words: str):
    body = whole(Response(message=Message(role="assistant", content=[SIGNED, TextPart(text="ok")])), {}, "m")
    item = body["output"][0]
    change(item)
    with pytest.raises(HttpError) as refused:
        translate({"model": "m", "input": [{"role": "user", "content": "q"}, item]})
    assert refused.value.param == "input[1].encrypted_content" and words in refused.value.info.message


# -- canonical events -> the event stream ---------------------------------------------------------


def play(events: list[Any], error: ErrorInfo | None = None) -> list[dict[str, Any]]:
    """The SSE payloads for `events`, each checked against its event name and the SDK's type."""
    stream = ResponsesStream(translate({"model": "m", "input": "x"}).echo, "m")
    raw = b"".join(b"".join(stream.events(e)) for e in events)
    if error is not None:
        raw += b"".join(stream.error(error, status_of(error, "openai")))
    raw += b"".join(stream.end())
    payloads = []
    for block in raw.decode().split("\n\n")[:-1]:
        name, data = block.split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert name == f"event: {payload['type']}"
        sdk_event.validate_python(payload)
        payloads.append(payload)
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    return payloads


def sdk_final(payloads: list[dict[str, Any]]) -> Any:
    """The response the SDK's stream helper accumulates (it raises on a sequence it does not accept)."""
    state = ResponseStreamState(input_tools=openai.omit, text_format=openai.omit)
    for payload in payloads:
        state.handle_event(sdk_event.validate_python(payload))
    return state._completed_response


def test_a_stream_with_reasoning_text_and_a_call_matches_the_whole_response():
    content = [
        ThinkingPart(text="Plan: call.", signature="sig", provider="anthropic", model="claude-x"),
        TextPart(text="Calling."),
        ToolCallPart(id="tu_1", name="lookup", arguments={"q": "x"}, raw_arguments='{"q": "x"}'),
    ]
    finish = Finish(
        response=Response(
            model="claude-x",
            message=Message(role="assistant", content=content),
            finish_reason=FinishReason(reason="tool_calls"),
            usage=Usage(input_tokens=10, output_tokens=5),
        )
    )
    events = [
        StreamStart(model="claude-x", provider="anthropic"),
        ReasoningStart(index=0),
        ReasoningDelta(index=0, text="Plan: "),
        ReasoningDelta(index=0, text="call."),
        ReasoningEnd(index=0, text="Plan: call.", signature="sig"),
        TextStart(index=1),
        TextDelta(index=1, text="Call"),
        TextDelta(index=1, text="ing."),
        TextEnd(index=1, text="Calling."),
        ToolCallStart(index=2, id="tu_1", name="lookup"),
        ToolCallDelta(index=2, id="tu_1", partial_json='{"q": '),
        ToolCallDelta(index=2, id="tu_1", partial_json='"x"}'),
        ToolCallEnd(index=2, id="tu_1", name="lookup", arguments={"q": "x"}, raw_arguments='{"q": "x"}'),
        finish,
    ]
    payloads = play(events)
    assert [p["type"] for p in payloads] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = payloads[-1]["response"]
    assert final["usage"]["total_tokens"] == 15 and final["status"] == "completed"
    whole_body = whole(finish.response, {}, "m")
    assert _normalised(final["output"]) == _normalised(whole_body["output"])
    assert sdk_final(payloads).output_text == "Calling."


def test_parts_that_interleave_each_end_on_their_own():
    """An OpenAI-compatible server streams calls while its text is still open, and a
    provider's opaque part joins the reasoning before it."""
    events = [
        StreamStart(model="x", provider="vllm"),
        ReasoningStart(index=0),
        ReasoningEnd(index=0, text="r"),
        ProviderPartEvent(index=1, api="openai", kind="reasoning", data={"type": "reasoning", "id": "rs_1"}),
        TextStart(index=2),
        TextDelta(index=2, text="Hel"),
        ToolCallStart(index=3, id="tu_1", name="a"),
        ToolCallStart(index=4, id="tu_2", name="b"),
        ToolCallDelta(index=4, id="tu_2", partial_json="{}"),
        ToolCallDelta(index=3, id="tu_1", partial_json="{}"),
        TextDelta(index=2, text="lo"),
        ToolCallEnd(index=3, id="tu_1", name="a", raw_arguments="{}"),
        ToolCallEnd(index=4, id="tu_2", name="b", raw_arguments="{}"),
        TextEnd(index=2, text="Hello"),
        Finish(response=Response(finish_reason=FinishReason(reason="tool_calls"))),
    ]
    payloads = play(events)
    final = sdk_final(payloads)
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call", "function_call"]
    assert final.output_text == "Hello"
    opened = carrier.open_sealed(final.output[0].encrypted_content, ["r"])
    assert opened == [
        ThinkingPart(text="r", provider="vllm", model="x"),
        ProviderPart(api="openai", kind="reasoning", data={"type": "reasoning", "id": "rs_1"}, provider="vllm"),
    ]


def test_an_error_mid_stream_ends_open_items_then_fails_the_response():
    events = [
        StreamStart(model="x"),
        TextStart(index=0),
        TextDelta(index=0, text="part"),
        TextEnd(index=0, text="part"),
    ]
    events += [ToolCallStart(index=1, id="tu_1", name="a"), ToolCallDelta(index=1, id="tu_1", partial_json='{"a"')]
    info = ErrorInfo(error_class="rate_limit", message="slow down", retryable=True, provider_status=429)
    payloads = play(events, info)
    error, failed = payloads[-2:]
    assert error == {
        "type": "error",
        "sequence_number": error["sequence_number"],
        "message": "slow down",
        "param": None,
        "code": "rate_limit_exceeded",
        "error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"},
    }
    assert failed["type"] == "response.failed"
    assert failed["response"]["error"] == {"code": "rate_limit_exceeded", "message": "slow down"}
    call = failed["response"]["output"][1]
    assert (call["status"], call["arguments"]) == ("incomplete", '{"a"')
    assert payloads[-3] == {
        "type": "response.output_item.done",
        "output_index": 1,
        "item": call,
        "sequence_number": payloads[-3]["sequence_number"],
    }


def test_a_response_cut_by_its_length_is_incomplete():
    finish = Finish(response=Response(message=Message.assistant("cut"), finish_reason=FinishReason(reason="length")))
    payloads = play(
        [StreamStart(), TextStart(index=0), TextDelta(index=0, text="cut"), TextEnd(index=0, text="cut"), finish]
    )
    assert payloads[-1]["type"] == "response.incomplete"
    assert payloads[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
