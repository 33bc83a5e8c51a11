"""Chat Completions wire JSON <-> the canonical form, both ways, without a daemon.

Requests: literal bodies in, the canonical request out (as its JSON), and the
refusals, each naming its field. Answers: canonical responses and events in, the
body and chunks out, checked as literal JSON and read by the `openai` SDK's own
types (a stream through the SDK's accumulator, which checks the order)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from trunkline.frontdoor.app import Headers, Parsed
from trunkline.frontdoor.errors import HttpError
from trunkline.frontdoor.openai_chat import ChatCompletions, ChatStream
from trunkline.protocol.messages import (
    ErrorInfo,
    FinishReason,
    FinishReasonName,
    Message,
    ReasoningDelta,
    Request,
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
from trunkline.protocol.messages import Finish as FinishEvent

ENDPOINT = ChatCompletions()
NO_HEADERS = Headers([])


def canonical(body: dict[str, Any]) -> dict[str, Any]:
    """The canonical request for `body`, as JSON."""
    parsed = ENDPOINT.parse(body, NO_HEADERS)
    out: dict[str, Any] = msgspec.to_builtins(parsed.request)
    return out


def refused(body: dict[str, Any]) -> HttpError:
    with pytest.raises(HttpError) as caught:
        ENDPOINT.parse(body, NO_HEADERS)
    return caught.value


USER = [{"role": "user", "content": "hi"}]

# -- requests -------------------------------------------------------------------------------------


def test_every_role_and_content_part_becomes_its_canonical_form():
    body = {
        "model": "anthropic:claude-sonnet-4-5",
        "messages": [
            {"role": "system", "content": "Be brief.", "name": "rules"},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {
                "role": "user",
                "name": "ann",
                "content": [
                    {"type": "text", "text": "What is in these?", "cache_control": {"type": "ephemeral"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
                    {"type": "image_url", "image_url": {"url": "data:image/PNG;base64,iVBORw0K"}},
                    {"type": "image_url", "image_url": "https://example.com/b.jpg"},
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "mp3"}},
                    {
                        "type": "file",
                        "file": {"file_data": "data:application/pdf;base64,JVBERg==", "filename": "a.pdf"},
                    },
                    {"type": "file", "file": {"file_data": "aGVsbG8=", "filename": "notes.txt"}},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Let me check."}, {"type": "refusal", "refusal": "Not the PDF."}],
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": '{"at": 1}'}},
                    {"id": "call_2", "type": "function", "function": {"name": "look", "arguments": ""}},
                    {"id": "call_3", "type": "function", "function": {"name": "look", "arguments": "[1, 2"}},
                ],
                "reasoning_content": "dropped",
                "annotations": [],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "a cat", "name": "look"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "a dog"}]},
            {"role": "tool", "tool_call_id": "call_3", "content": "bad arguments"},
            {"role": "assistant", "content": None, "refusal": "I will not."},
            {"role": "user", "content": "Fine."},
        ],
    }
    assert canonical(body) == {
        "model": "anthropic:claude-sonnet-4-5",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}], "name": "rules"},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {
                "role": "user",
                "name": "ann",
                "content": [
                    {"type": "text", "text": "What is in these?"},
                    {"type": "image", "url": "https://example.com/a.png", "detail": "low"},
                    {"type": "image", "data": "iVBORw0K", "media_type": "image/png"},
                    {"type": "image", "url": "https://example.com/b.jpg"},
                    {"type": "audio", "data": "UklGRg==", "media_type": "audio/mpeg"},
                    {"type": "document", "data": "JVBERg==", "media_type": "application/pdf", "name": "a.pdf"},
                    {"type": "document", "data": "aGVsbG8=", "media_type": "text/plain", "name": "notes.txt"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {"type": "text", "text": "Not the PDF."},
                    {"type": "tool_call", "id": "call_1", "name": "look", "arguments": {"at": 1}},
                    {"type": "tool_call", "id": "call_2", "name": "look"},
                    {"type": "tool_call", "id": "call_3", "name": "look", "arguments": None, "raw_arguments": "[1, 2"},
                ],
            },
            {
                "role": "tool",
                "content": [{"type": "tool_result", "tool_call_id": "call_1", "content": "a cat", "name": "look"}],
            },
            {
                "role": "tool",
                "content": [
                    {"type": "tool_result", "tool_call_id": "call_2", "content": [{"type": "text", "text": "a dog"}]}
                ],
            },
            {
                "role": "tool",
                "content": [{"type": "tool_result", "tool_call_id": "call_3", "content": "bad arguments"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "I will not."}]},
            {"role": "user", "content": [{"type": "text", "text": "Fine."}]},
        ],
    }


def test_the_settings_become_canonical_fields():
    body = {
        "model": "gpt-5",
        "messages": USER,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "look",
                    "description": "Look at a thing.",
                    "parameters": {"type": "object", "properties": {"at": {"type": "integer"}}},
                    "strict": True,
                },
            },
            {"type": "function", "function": {"name": "wait"}},
        ],
        "tool_choice": {"type": "function", "function": {"name": "look"}},
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "thing", "schema": {"type": "object"}, "strict": True, "description": "x"},
        },
        "stop": "END",
        "max_tokens": 10,
        "max_completion_tokens": 500,
        "temperature": 1,
        "top_p": 0.5,
        "seed": 42,
        "reasoning_effort": "low",
        "metadata": {"team": "search"},
        "user": "old-user-field",
        "safety_identifier": "user-42",
        "stream": True,
        "stream_options": {"include_usage": True},
        "n": 1,
        "logprobs": False,
        "frequency_penalty": 0,
        "presence_penalty": 0.0,
        "modalities": ["text"],
        "parallel_tool_calls": True,
        "session_id": "s-1",
        "max_retries": 0,
        "timeouts": {"request_s": 30},
        "provider": "anthropic",
    }
    assert canonical(body) == {
        "model": "gpt-5",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "provider": "anthropic",
        "tools": [
            {
                "name": "look",
                "description": "Look at a thing.",
                "parameters": {"type": "object", "properties": {"at": {"type": "integer"}}},
                "strict": True,
            },
            {"name": "wait", "parameters": {"type": "object", "properties": {}}},
        ],
        "tool_choice": {"mode": "tool", "name": "look"},
        "response_format": {"kind": "json_schema", "schema": {"type": "object"}, "name": "thing", "strict": True},
        "temperature": 1.0,
        "top_p": 0.5,
        "max_tokens": 500,
        "stop_sequences": ["END"],
        "seed": 42,
        "reasoning_effort": "low",
        "metadata": {"team": "search", "user_id": "user-42"},
        "session_id": "s-1",
        "max_retries": 0,
        "timeouts": {"request_s": 30.0},
    }
    parsed = ENDPOINT.parse(body, NO_HEADERS)
    assert parsed.stream and parsed.model == "gpt-5" and parsed.extra == {"include_usage": True}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("none", {"mode": "none"}),
        ("auto", {}),  # the default mode, left off the wire
        ("required", {"mode": "required"}),
        ({"type": "function", "function": {"name": "b"}}, {"mode": "tool", "name": "b"}),
    ],
)
def test_tool_choice(given: Any, expected: dict[str, Any]):
    tools = [{"type": "function", "function": {"name": n}} for n in ("a", "b")]
    request = canonical({"model": "m", "messages": USER, "tools": tools, "tool_choice": given})
    assert request["tool_choice"] == expected


def test_allowed_tools_narrows_the_tools_sent():
    tools = [{"type": "function", "function": {"name": n}} for n in ("a", "b", "c")]
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "c"}}]},
    }
    request = canonical({"model": "m", "messages": USER, "tools": tools, "tool_choice": choice})
    assert [t["name"] for t in request["tools"]] == ["c"] and request["tool_choice"] == {"mode": "required"}
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "z"}}]},
    }
    error = refused({"model": "m", "messages": USER, "tools": tools, "tool_choice": choice})
    assert error.param == "tool_choice.allowed_tools.tools[0]" and "`z`, which is not among the tools" in str(error)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"type": "text"}, None),
        ({"type": "json_object"}, {"kind": "json_object"}),
        ({"type": "json_schema", "json_schema": {"name": "n"}}, {"kind": "json_schema", "name": "n"}),
    ],
)
def test_response_format(given: dict[str, Any], expected: dict[str, Any] | None):
    assert canonical({"model": "m", "messages": USER, "response_format": given}).get("response_format") == expected


def test_stop_as_a_list_and_max_tokens_alone():
    request = canonical({"model": "m", "messages": USER, "stop": ["a", "b"], "max_tokens": 64})
    assert request["stop_sequences"] == ["a", "b"] and request["max_tokens"] == 64


def test_openais_service_settings_are_carried_for_the_openai_providers():
    body = {
        "model": "m",
        "messages": USER,
        "service_tier": "flex",
        "store": True,
        "prompt_cache_key": "k",
        "prompt_cache_retention": "24h",
        "moderation": {"model": "omni-moderation-latest"},
        "parallel_tool_calls": False,
        # What the client put there itself wins.
        "provider_options": {"openai": {"service_tier": "priority"}, "mock": {"delay": 0}},
    }
    assert canonical(body)["provider_options"] == {
        "openai": {
            "service_tier": "priority",
            "store": True,
            "prompt_cache_key": "k",
            "prompt_cache_retention": "24h",
            "parallel_tool_calls": False,
            "extra_body": {"moderation": {"model": "omni-moderation-latest"}},
        },
        "openai_compat": {
            "service_tier": "flex",
            "store": True,
            "prompt_cache_key": "k",
            "prompt_cache_retention": "24h",
            "moderation": {"model": "omni-moderation-latest"},
            "parallel_tool_calls": False,
        },
        "mock": {"delay": 0},
    }
    assert "provider_options" not in canonical({"model": "m", "messages": USER, "parallel_tool_calls": True})


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("n", 2, "must be 1"),
        ("logprobs", True, "no log probabilities"),
        ("top_logprobs", 3, "no log probabilities"),
        ("frequency_penalty", 0.5, "provider_options.<provider>"),
        ("presence_penalty", -1, "provider_options.<provider>"),
        ("logit_bias", {"50256": -100}, "tokenizer"),
        ("modalities", ["text", "audio"], "answers in text"),
        ("audio", {"voice": "alloy", "format": "wav"}, "answers in text"),
        ("prediction", {"type": "content", "content": "x"}, "no canonical form"),
        ("web_search_options", {}, "server tools"),
        ("verbosity", "low", "no canonical form"),
        ("functions", [{"name": "f"}], "send `tools`"),
        ("function_call", "auto", "send `tool_choice`"),
    ],
)
def test_what_the_canonical_form_cannot_express_is_refused_naming_the_field(field: str, value: Any, words: str):
    error = refused({"model": "m", "messages": USER, field: value})
    assert error.param == field and f"`{field}`" in str(error) and words in str(error)
    assert error.info.error_class == "invalid_request"


@pytest.mark.parametrize(
    ("message", "param", "words"),
    [
        ({"role": "function", "name": "f", "content": "x"}, "messages[0].role", "deprecated form of `tool`"),
        ({"role": "robot", "content": "x"}, "messages[0].role", "may not be 'robot'"),
        ({"role": "user"}, "messages[0].content", "is required"),
        ({"role": "user", "content": 5}, "messages[0].content", "must be a string or an array, not an integer"),
        ({"role": "user", "content": [{"type": "video"}]}, "messages[0].content[0].type", "may not be 'video'"),
        (
            {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            "messages[0].content[0].type",
            "may not be 'image_url'",
        ),
        (
            {"role": "user", "content": [{"type": "text", "text": "a", "color": "red"}]},
            "messages[0].content[0].color",
            "unknown field",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,abc"}}]},
            "messages[0].content[0].image_url.url",
            "data:<media type>;base64,<data>",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "original"}}],
            },
            "messages[0].content[0].image_url.detail",
            "no canonical form",
        ),
        (
            {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-abc"}}]},
            "messages[0].content[0].file.file_id",
            "send its bytes as `file_data`",
        ),
        (
            {"role": "user", "content": [{"type": "file", "file": {"filename": "a.pdf"}}]},
            "messages[0].content[0].file.file_data",
            "needs `file_data`",
        ),
        ({"role": "assistant", "audio": {"id": "audio_1"}}, "messages[0].audio", "audio OpenAI kept"),
        (
            {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
            "messages[0].function_call",
            "send `tool_calls`",
        ),
        (
            {"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "g", "input": "x"}}]},
            "messages[0].tool_calls[0].type",
            "custom tool calls",
        ),
        ({"role": "tool", "content": "x"}, "messages[0].tool_call_id", "is required"),
    ],
)
def test_a_message_that_does_not_fit_is_refused_naming_its_field(message: dict[str, Any], param: str, words: str):
    error = refused({"model": "m", "messages": [message]})
    assert error.param == param and words in str(error), str(error)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ([], None, "must be a JSON object"),
        ({"messages": USER}, "model", "is required"),
        ({"model": "", "messages": USER}, "model", "is required"),
        (
            {"model": "m", "messages": USER, "temperature": "hot"},
            "temperature",
            "must be a number or null, not a string",
        ),
        (
            {"model": "m", "messages": USER, "max_tokens": True},
            "max_tokens",
            "must be an integer or null, not a boolean",
        ),
        ({"model": "m", "messages": USER, "reasoning_effort": "extreme"}, "reasoning_effort", "may not be 'extreme'"),
        ({"model": "m", "messages": USER, "metadata": {"a": 1}}, "metadata[...]", "must be a string"),
        ({"model": "m", "messages": USER, "temprature": 1}, "temprature", "not a Chat Completions field"),
        (
            {"model": "m", "messages": USER, "tools": [{"type": "custom", "custom": {"name": "g"}}]},
            "tools[0].type",
            "custom tools",
        ),
        ({"model": "m", "messages": USER, "tool_choice": "sometimes"}, "tool_choice", "may not be 'sometimes'"),
        (
            {"model": "m", "messages": USER, "response_format": {"type": "xml"}},
            "response_format.type",
            "may not be 'xml'",
        ),
        (
            {"model": "m", "messages": USER, "provider_options": {"openai": 1}},
            "provider_options[...]",
            "must be an object",
        ),
    ],
)
def test_a_body_that_does_not_fit_is_refused_naming_its_field(body: Any, param: str | None, words: str):
    error = refused(body)
    assert error.param == param and words in str(error), str(error)


# -- answers ----------------------------------------------------------------------------------------

PARSED = Parsed(Request(model="mock:echo", messages=[]), False, "my-model", {"include_usage": False})

USAGE = Usage(
    input_tokens=1200,
    output_tokens=300,
    reasoning_tokens=120,
    cache_read_tokens=1000,
    cache_write_tokens=150,
)


def answer(*parts: Any, reason: FinishReasonName = "stop", raw: str | None = None) -> Response:
    return Response(
        id="r1",
        message=Message(role="assistant", content=list(parts)),
        finish_reason=FinishReason(reason=reason, raw=raw),
        usage=USAGE,
    )


def test_a_whole_answer_with_reasoning_text_and_tool_calls():
    response = answer(
        ThinkingPart(text="Two lookups."),
        TextPart(text="Looking."),
        ToolCallPart(id="tu_1", name="look", arguments={"at": 1}),
        ToolCallPart(id="tu_2", name="look", arguments={}),
        ToolCallPart(id="tu_3", name="look", arguments=None, raw_arguments="[1, 2"),
        reason="tool_calls",
    )
    body = ENDPOINT.whole(response, PARSED)
    completion = ChatCompletion.model_validate(body)
    assert body.pop("created") > 0
    assert body == {
        "id": "chatcmpl-r1",
        "object": "chat.completion",
        "model": "my-model",
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Looking.",
                    "refusal": None,
                    "tool_calls": [
                        {"id": "tu_1", "type": "function", "function": {"name": "look", "arguments": '{"at":1}'}},
                        {"id": "tu_2", "type": "function", "function": {"name": "look", "arguments": "{}"}},
                        {"id": "tu_3", "type": "function", "function": {"name": "look", "arguments": "[1, 2"}},
                    ],
                    "reasoning_content": "Two lookups.",
                },
                "finish_reason": "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 300,
            "total_tokens": 1500,
            "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 150},
            "completion_tokens_details": {"reasoning_tokens": 120},
        },
    }
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 1000


@pytest.mark.parametrize(
    ("reason", "raw", "parts", "finish", "content", "refusal"),
    [
        ("stop", None, [TextPart(text="ok")], "stop", "ok", None),
        ("length", None, [TextPart(text="o")], "length", "o", None),
        ("other", None, [], "stop", "", None),
        ("cancelled", None, [TextPart(text="o")], "stop", "o", None),
        # A provider that says it stopped while calling a tool: OpenAI says tool_calls.
        ("stop", None, [ToolCallPart(id="tu_1", name="f")], "tool_calls", None, None),
        ("content_filter", "SAFETY", [], "content_filter", "", None),
        ("content_filter", "refusal", [TextPart(text="I can't help.")], "content_filter", None, "I can't help."),
    ],
)
def test_finish_reasons_and_refusals(
    reason: FinishReasonName, raw: str | None, parts: list[Any], finish: str, content: str | None, refusal: str | None
):
    body = ENDPOINT.whole(answer(*parts, reason=reason, raw=raw), PARSED)
    (choice,) = body["choices"]
    assert (choice["finish_reason"], choice["message"]["content"], choice["message"]["refusal"]) == (
        finish,
        content,
        refusal,
    )
    ChatCompletion.model_validate(body)


def chunks_of(stream: ChatStream, events: list[Any]) -> list[dict[str, Any]]:
    raw = b"".join(b"".join(stream.events(e)) for e in events) + b"".join(stream.end())
    blocks = raw.decode().split("\n\n")
    assert blocks[-2:] == ["data: [DONE]", ""], blocks[-3:]
    return [json.loads(b.removeprefix("data: ")) for b in blocks[:-2]]


def test_a_stream_of_text_reasoning_and_parallel_tool_calls():
    final = answer(
        TextPart(text="Hi."),
        ToolCallPart(id="tu_a", name="look", arguments={"at": 1}),
        ToolCallPart(id="tu_b", name="wait", arguments={}),
        reason="tool_calls",
    )
    events = [
        StreamStart(model="echo"),
        ReasoningDelta(index=0, text="Hmm."),
        TextStart(index=1),
        TextDelta(index=1, text="Hi"),
        TextDelta(index=1, text=""),
        TextDelta(index=1, text="."),
        TextEnd(index=1, text="Hi."),
        ToolCallStart(index=2, id="tu_a", name="look"),
        ToolCallDelta(index=2, id="tu_a", partial_json='{"at"'),
        ToolCallDelta(index=2, id="tu_a", partial_json=": 1}"),
        ToolCallEnd(index=2, id="tu_a", name="look", arguments={"at": 1}, raw_arguments='{"at": 1}'),
        # A call given whole (no fragments), without arguments: `{}` at its end.
        ToolCallStart(index=3, id="tu_b", name="wait"),
        ToolCallEnd(index=3, id="tu_b", name="wait", arguments={}, raw_arguments=""),
        FinishEvent(response=final),
    ]
    stream = ChatStream("my-model", "chatcmpl-1", 1700000000, include_usage=True)
    chunks = chunks_of(stream, events)
    top = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "my-model"}
    assert all({**c, **top} == c and c["system_fingerprint"] is None for c in chunks)
    deltas = [(c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) for c in chunks[:-1]]
    assert deltas == [
        ({"role": "assistant", "content": "", "refusal": None}, None),
        ({"reasoning_content": "Hmm."}, None),
        ({"content": "Hi"}, None),
        ({"content": "."}, None),
        (
            {
                "tool_calls": [
                    {"index": 0, "id": "tu_a", "type": "function", "function": {"name": "look", "arguments": ""}}
                ]
            },
            None,
        ),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"at"'}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}, None),
        (
            {
                "tool_calls": [
                    {"index": 1, "id": "tu_b", "type": "function", "function": {"name": "wait", "arguments": ""}}
                ]
            },
            None,
        ),
        ({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}, None),
        ({}, "tool_calls"),
    ]
    assert all(c["usage"] is None and c["choices"][0]["logprobs"] is None for c in chunks[:-1])
    assert chunks[-1] == {
        **top,
        "system_fingerprint": None,
        "choices": [],
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 300,
            "total_tokens": 1500,
            "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 150},
            "completion_tokens_details": {"reasoning_tokens": 120},
        },
    }
    # The SDK's own accumulator (what `chat.completions.stream` runs) takes the chunks in this order.
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    completion = state.get_final_completion()
    message = completion.choices[0].message
    assert message.content == "Hi." and completion.choices[0].finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []] == [
        ("tu_a", "look", '{"at": 1}'),
        ("tu_b", "wait", "{}"),
    ]
    assert completion.usage is not None and completion.usage.total_tokens == 1500


def test_without_include_usage_no_usage_goes_out():
    stream = ChatStream("m", "chatcmpl-2", 1, include_usage=False)
    chunks = chunks_of(stream, [StreamStart(), TextDelta(text="x"), FinishEvent(response=answer(TextPart(text="x")))])
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "stop"]
    assert all("usage" not in c for c in chunks)


def test_an_error_after_the_stream_began_is_an_error_event_then_done():
    stream = ChatStream("m", "chatcmpl-3", 1, include_usage=True)
    info = ErrorInfo(error_class="server_error", message="upstream fell", provider_code="boom")
    out = b"".join([*stream.events(StreamStart()), *stream.error(info, 500), *stream.end()]).decode()
    blocks = out.split("\n\n")
    assert json.loads(blocks[1].removeprefix("data: ")) == {
        "error": {"message": "upstream fell", "type": "server_error", "param": None, "code": "boom"}
    }
    assert blocks[2:] == ["data: [DONE]", ""]
