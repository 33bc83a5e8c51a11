"""Chat Completions translators: canonical -> wire JSON and wire JSON / SSE -> canonical, golden."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx
import pytest

from helpers import REPO, check_invariants, through_pipeline
from trunkline.protocol.codec import decode_event, split_frame
from trunkline.protocol.messages import (
    AudioPart,
    Finish,
    ImagePart,
    Job,
    Message,
    ModelInfo,
    Request,
    ResponseFormat,
    TextDelta,
    ThinkingPart,
    Tool,
    ToolCallDelta,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from trunkline.workers._emit import Emitter
from trunkline.workers.errors import ProviderError
from trunkline.workers.openai_compat import errors
from trunkline.workers.openai_compat.request import build
from trunkline.workers.openai_compat.response import parse
from trunkline.workers.openai_compat.stream import ChatStream

MODEL = ModelInfo(id="vllm:qwen3", provider="vllm", wire_name="Qwen/Qwen3-8B", reasoning=True)
PLAIN = ModelInfo(id="vllm:small", provider="vllm", wire_name="small", reasoning=False)
CASSETTES = REPO / "cassettes" / "openai_compat"
RECORDINGS = REPO.parent / "shared" / "recordings"
WEATHER = Tool(name="weather", description="Weather", parameters={"type": "object", "properties": {}})


def body(*messages, model=MODEL, wire_ids=None, stream=False, instance=None, **fields):
    return build(
        Request(model=model.id, messages=list(messages), **fields),
        model,
        provider="vllm",
        wire_ids=wire_ids or {},
        stream=stream,
        instance=instance or {},
    )


# -- request ---------------------------------------------------------------------------


def test_messages_roles_and_tool_round_trip():
    call = ToolCallPart(
        id="tu_1", name="weather", arguments={"city": "Paris"}, provider_id="call_abc123_with_underscores"
    )
    built = body(
        Message.system("Be brief."),
        Message.developer("Metric units."),
        Message.user("Weather?"),
        Message(role="assistant", content=[ThinkingPart(text="hmm", provider="anthropic", signature="s"), call]),
        Message.tool_result("tu_1", "18°C"),
        Message(role="tool", content=[ToolResultPart(tool_call_id="tu_1", content="boom", is_error=True)]),
        wire_ids={"tu_1": "call_abc123_with_underscores"},
        tools=[WEATHER],
        tool_choice=ToolChoice(mode="tool", name="weather"),
    )
    assert built.body == {
        "model": "Qwen/Qwen3-8B",
        "messages": [
            {"role": "system", "content": "Be brief.\n\nMetric units."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_abc123_with_underscores",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_abc123_with_underscores", "content": "18°C"},
            {"role": "tool", "tool_call_id": "call_abc123_with_underscores", "content": "ERROR: boom"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "Weather",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "weather"}},
    }
    assert [w.code for w in built.warnings] == ["thinking_dropped"]


@pytest.mark.parametrize(("mode", "wire"), [("auto", "auto"), ("none", "none"), ("required", "required")])
def test_tool_choice_modes(mode, wire):
    assert body(Message.user("x"), tools=[WEATHER], tool_choice=ToolChoice(mode=mode)).body["tool_choice"] == wire


def test_images_as_urls_and_data_uris_and_dropped_audio():
    built = body(
        Message.user(
            "look",
            ImagePart(url="https://x/cat.png", detail="high"),
            ImagePart(data="aGk=", media_type="image/png"),
            AudioPart(url="https://x/a.wav"),
        )
    )
    assert built.body["messages"][0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
    ]
    assert built.warnings[0].code == "unsupported_content"


def test_sampling_limits_and_format():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    built = body(
        Message.user("x"),
        max_tokens=50,
        stop_sequences=["END"],
        temperature=0.1,
        top_p=0.8,
        seed=3,
        response_format=ResponseFormat(kind="json_schema", schema=schema, name="num"),
        reasoning_effort="low",
        metadata={"user_id": "u1"},
    )
    b = built.body
    assert (b["max_completion_tokens"], b["stop"], b["temperature"], b["top_p"], b["seed"]) == (
        50,
        ["END"],
        0.1,
        0.8,
        3,
    )
    assert b["response_format"] == {"type": "json_schema", "json_schema": {"name": "num", "schema": schema}}
    assert b["reasoning_effort"] == "low" and b["user"] == "u1"
    legacy = body(Message.user("x"), max_tokens=50, instance={"legacy_max_tokens": True}).body
    assert legacy["max_tokens"] == 50 and "max_completion_tokens" not in legacy
    plain = body(Message.user("x"), model=PLAIN, reasoning_effort="high")
    assert "reasoning_effort" not in plain.body and plain.warnings[0].code == "reasoning_unsupported"
    assert body(Message.user("x"), response_format=ResponseFormat(kind="json_object")).body["response_format"] == {
        "type": "json_object"
    }


def test_stream_options_and_the_instance_that_cannot_take_them():
    streaming = body(Message.user("x"), stream=True)
    assert streaming.body["stream"] is True and streaming.body["stream_options"] == {"include_usage": True}
    quiet = body(Message.user("x"), stream=True, instance={"stream_usage": False})
    assert "stream_options" not in quiet.body


def test_provider_options_are_merged():
    built = body(Message.user("x"), provider_options={"vllm": {"top_k": 20, "repetition_penalty": 1.1}})
    assert built.body["top_k"] == 20 and built.body["repetition_penalty"] == 1.1
    built = body(Message.user("x"), provider_options={"openai_compat": {"min_p": 0.1}})
    assert built.body["min_p"] == 0.1 and not built.warnings


def test_an_unknown_option_is_forwarded_with_a_warning_and_extra_body_without_one():
    built = body(Message.user("x"), provider_options={"vllm": {"my_knob": 3, "extra_body": {"other_knob": 4}}})
    assert built.body["my_knob"] == 3 and built.body["other_knob"] == 4 and "extra_body" not in built.body
    (warning,) = built.warnings
    assert warning.code == "unknown_option" and "my_knob" in warning.message and "other_knob" not in warning.message


# -- response ------------------------------------------------------------------------------

COMPLETION = {
    "id": "chatcmpl-123",
    "object": "chat.completion",
    "model": "Qwen/Qwen3-8B",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "logprobs": {"content": [{"token": "x"}]},
            "message": {
                "role": "assistant",
                "content": "Checking.",
                "reasoning_content": "think first",
                "tool_calls": [
                    {
                        "id": "call_abc123_with_underscores",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
        }
    ],
    "usage": {
        "prompt_tokens": 100,
        "completion_tokens": 30,
        "total_tokens": 130,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 12},
    },
}


def test_parse_a_completion():
    response, reported = parse(COMPLETION, include_raw=True)
    assert reported and response.id == "chatcmpl-123" and response.model == "Qwen/Qwen3-8B"
    thinking, text, call = response.message.content
    assert thinking.text == "think first" and text.text == "Checking."
    assert (call.name, call.arguments, call.provider_id) == (
        "weather",
        {"city": "Paris"},
        "call_abc123_with_underscores",
    )
    assert response.finish_reason.reason == "tool_calls"
    u = response.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.reasoning_tokens) == (100, 30, 64, 12)
    assert response.raw["choices"][0]["logprobs"] == {"content": [{"token": "x"}]}  # extensions kept verbatim


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_calls"),
        ("content_filter", "content_filter"),
        ("function_call", "tool_calls"),
        ("eos", "other"),
        ("error", "error"),
    ],
)
def test_finish_reasons(raw, reason):
    body_ = {"choices": [{"finish_reason": raw, "message": {"content": "x"}}]}
    assert parse(body_)[0].finish_reason.reason == reason


def test_missing_usage_is_reported_as_missing():
    _response, reported = parse({"choices": [{"finish_reason": "stop", "message": {"content": "x"}}], "usage": None})
    assert not reported


def test_malformed_arguments_stay_a_tool_call_with_null_arguments_and_the_raw_text():
    calls = [
        {"id": "a", "function": {"name": "ok", "arguments": '{"x": 1}'}},
        {"id": "b", "function": {"name": "offschema", "arguments": '{"unexpected": true}'}},
        {"id": "c", "function": {"name": "cut", "arguments": '{"x": 1, "y"'}},
    ]
    normal, _ = parse({"choices": [{"finish_reason": "tool_calls", "message": {"tool_calls": calls}}]})
    assert [c.arguments for c in normal.tool_calls] == [{"x": 1}, {"unexpected": True}, None]
    assert normal.tool_calls[2].raw_arguments == '{"x": 1, "y"' and normal.finish_reason.reason == "tool_calls"
    response, _ = parse({"choices": [{"finish_reason": "error", "message": {"tool_calls": calls}}]})
    assert [c.arguments for c in response.tool_calls] == [{"x": 1}, {"unexpected": True}, None]
    assert response.tool_calls[2].raw_arguments == '{"x": 1, "y"'
    assert response.finish_reason.reason == "error"


def test_malformed_completions_are_invalid_responses():
    for bad in ({"choices": []}, {"object": "x"}, [], {"choices": [{"message": None}]}):
        with pytest.raises(ProviderError) as info:
            parse(bad)
        assert info.value.error_class == "invalid_response"


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body_", "error_class"),
    [
        (
            401,
            {"error": {"message": "Incorrect API key", "type": "invalid_request_error", "code": "invalid_api_key"}},
            "authentication",
        ),
        (403, {"error": {"message": "no", "type": "permission_error"}}, "access_denied"),
        (
            404,
            {
                "error": {
                    "message": "The model `gpt-5o` does not exist",
                    "type": "invalid_request_error",
                    "code": "model_not_found",
                }
            },
            "not_found",
        ),
        (
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
            "context_length",
        ),
        (
            400,
            {
                "error": {
                    "message": "Unsupported parameter: 'max_tokens'",
                    "type": "invalid_request_error",
                    "param": "max_tokens",
                    "code": "unsupported_parameter",
                }
            },
            "invalid_request",
        ),
        (429, {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}, "rate_limit"),
        (429, {"error": {"message": "You exceeded your quota", "code": "insufficient_quota"}}, "quota_exceeded"),
        (
            429,
            {
                "error": {
                    "code": 429,
                    "message": "Provider returned error",
                    "metadata": {"raw": "temporarily rate-limited upstream"},
                }
            },
            "rate_limit",
        ),
        (500, {"error": {"message": "boom", "type": "server_error"}}, "server_error"),
        (
            503,
            {"object": "error", "message": "Model is loading", "type": "ServiceUnavailable", "code": 503},
            "model_not_loaded",
        ),
        (400, {"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}, "invalid_request"),
        (500, {"error": "plain text error"}, "server_error"),
    ],
)
def test_error_classification(status, body_, error_class):
    err = errors.classify(status, httpx.Headers(), json.dumps(body_).encode())
    assert err.error_class == error_class and err.status == status


def test_openrouter_keeps_the_upstream_text():
    err = errors.classify(
        429,
        httpx.Headers(),
        json.dumps(
            {
                "error": {
                    "code": 429,
                    "message": "Provider returned error",
                    "metadata": {"raw": "google/x is rate-limited"},
                }
            }
        ).encode(),
    )
    assert "google/x is rate-limited" in err.message and err.retryable


def test_recorded_errors():
    for case in sorted((RECORDINGS / "openai-chat").glob("*/*")) if RECORDINGS.exists() else []:
        meta = json.loads((case / "meta.json").read_text())
        if meta.get("status") in (400, 404, 429):
            err = errors.classify(
                meta["status"], httpx.Headers(meta.get("headers") or {}), (case / "response.body").read_bytes()
            )
            expected = {400: "invalid_request", 404: "not_found", 429: "rate_limit"}[meta["status"]]
            assert err.error_class == expected, (case.name, err)


# -- stream ------------------------------------------------------------------------------------


def chunkings(data: bytes) -> list[list[bytes]]:
    rng = random.Random(len(data))
    cuts = sorted(rng.sample(range(1, len(data)), min(60, len(data) - 1)))
    return [
        [data],
        [data[i : i + 1] for i in range(len(data))],
        [data[i : i + 5] for i in range(0, len(data), 5)],
        [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)],
    ]


def run(chunks: list[bytes]) -> list:
    frames: list[bytes] = []
    job = Job(
        request_id="r",
        client_id="c",
        operation_id="o",
        model=MODEL,
        request=Request(model=MODEL.id, messages=[Message.user("x")]),
    )
    counter = iter(range(100))
    emitter = Emitter(job, "vllm", lambda rid, f, seq, t: frames.extend(f), lambda pid: f"tu_{next(counter)}")
    through_pipeline(chunks, ChatStream(provider="vllm"), "sse", emitter, "vllm")
    return [decode_event(split_frame(f)[1]) for f in frames]


@pytest.mark.parametrize("chunking", range(4))
def test_parallel_calls_late_ids_and_chunks_after_usage(chunking):
    events = run(chunkings((CASSETTES / "parallel-tools.sse").read_bytes())[chunking])
    check_invariants(events)
    response = events[-1].response
    assert response.text == "Let me look — both."
    assert [(c.name, c.arguments, c.provider_id) for c in response.tool_calls] == [
        ("get_weather", {"city": "Paris"}, "call_A"),
        ("get_time", {"tz": "Asia/Tōkyō"}, "call_B"),
    ]
    # the fragment that came before call_B's name was held, then sent verbatim
    assert [e.partial_json for e in events if type(e) is ToolCallDelta] == [
        '{"city":',
        '"Paris"}',
        '{"tz": ',
        '"Asia/Tōkyō"}',
    ]
    assert response.finish_reason.reason == "tool_calls"
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.cache_read_tokens) == (90, 40, 32)
    assert response.model == "Qwen/Qwen3-8B" and response.id == "chatcmpl-par"


@pytest.mark.parametrize("chunking", range(4))
def test_reasoning_deltas_and_missing_ids(chunking):
    events = run(chunkings((CASSETTES / "reasoning-noid.sse").read_bytes())[chunking])
    check_invariants(events)
    response = events[-1].response
    assert response.message.content[0].text == "Step one. Step two."
    assert response.text == "Done."
    call = response.tool_calls[0]
    assert call.provider_id is None and call.id.startswith("tu_") and call.arguments == {}
    assert response.finish_reason.reason == "tool_calls"
    assert response.usage.reasoning_tokens == 8 and not response.usage.estimated  # counted by the server


def usage_chunk(usage: dict) -> bytes:
    return f"data: {json.dumps({'id': 'c', 'model': 'm', 'choices': [], 'usage': usage})}\n\n".encode()


def test_reasoning_without_a_count_is_estimated_from_its_text_and_cache_writes_are_read():
    """vLLM and llama.cpp stream reasoning text with no count of its tokens; OpenRouter
    says the tokens it wrote to the cache."""
    usage = {
        "prompt_tokens": 900,
        "completion_tokens": 60,
        "total_tokens": 960,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 850},
    }
    stream = (
        b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"reasoning_content":"Two plus two. "}}]}\n\n'
        b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"4"}}]}\n\n'
        b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"reasoning_content":"Checked it."}}]}\n\n'
        b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        + usage_chunk(usage)
        + b"data: [DONE]\n\n"
    )
    response = run([stream])[-1].response
    u = response.usage
    assert u.estimated_fields == ["reasoning_tokens"] and 0 < u.reasoning_tokens < 60  # both parts' text
    assert (u.input_tokens, u.cache_write_tokens, u.cache_read_tokens) == (900, 850, 0)
    whole, reported = parse(
        {
            "choices": [{"finish_reason": "stop", "message": {"content": "4", "reasoning": "Two plus two."}}],
            "usage": usage,
        }
    )
    assert reported and whole.usage.estimated_fields == ["reasoning_tokens"] and whole.usage.cache_write_tokens == 850


def test_degraded_stream_returns_null_arguments():
    events = run([(CASSETTES / "degraded.sse").read_bytes()])
    check_invariants(events)
    assert type(events[-1]) is Finish
    response = events[-1].response
    assert response.finish_reason.reason == "error"
    assert [c.arguments for c in response.tool_calls] == [{"ok": 1}, None]
    assert response.tool_calls[1].raw_arguments == '{"cut": tr'


def test_malformed_arguments_on_a_normal_finish_stay_a_call_with_a_warning():
    data = (
        (CASSETTES / "degraded.sse").read_bytes().replace(b'"finish_reason":"error"', b'"finish_reason":"tool_calls"')
    )
    events = run([data])
    check_invariants(events)
    response = events[-1].response
    assert response.finish_reason.reason == "tool_calls"
    assert [c.arguments for c in response.tool_calls] == [{"ok": 1}, None]
    # The cassette reports no usage: the pipeline estimates it, as the worker does.
    assert [w.code for w in response.warnings] == ["usage_estimated", "tool_arguments_invalid"]


def recorded() -> list[Path]:
    out = []
    for case in sorted((RECORDINGS / "openai-chat").glob("*/*")) if RECORDINGS.exists() else []:
        meta = json.loads((case / "meta.json").read_text())
        if meta.get("stream_kind") == "sse" and (meta.get("status") or 200) == 200:
            out.append(case)
    return out


def naive(data: bytes) -> dict:
    """The recording read without our code: text, tool arguments by index, last usage, finish reason."""
    text, tools, usage, finish = "", {}, None, None
    for block in data.decode().replace("\r\n", "\n").split("\n\n"):
        payload = "".join(line[5:].strip() for line in block.split("\n") if line.startswith("data:"))
        if not payload or payload == "[DONE]":
            continue
        chunk = json.loads(payload)
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                tools[call["index"]] = tools.get(call["index"], "") + (
                    (call.get("function") or {}).get("arguments") or ""
                )
            finish = choice.get("finish_reason") or finish
    return {
        "text": text,
        "tools": [json.loads(tools[i]) if tools[i] else {} for i in sorted(tools)],
        "usage": usage,
        "finish": finish,
    }


@pytest.mark.skipif(not RECORDINGS.exists(), reason="../shared/recordings is not present")
@pytest.mark.parametrize("case", recorded(), ids=lambda p: p.name[-50:])
def test_recorded_stream(case):
    data = (case / "response.body").read_bytes()
    expected = naive(data)
    for chunks in chunkings(data):
        events = run(chunks)
        check_invariants(events)
        assert type(events[-1]) is Finish, events[-1]
        response = events[-1].response
        assert response.text == expected["text"]
        assert "".join(e.text for e in events if type(e) is TextDelta) == expected["text"]
        assert [c.arguments for c in response.tool_calls] == expected["tools"]
        assert response.finish_reason.raw == expected["finish"]
        if expected["usage"]:
            assert response.usage.input_tokens == expected["usage"]["prompt_tokens"]
            assert response.usage.output_tokens == expected["usage"]["completion_tokens"]
        assert response.model  # from a non-empty chunk, even when the first is blank (Azure)


# -- catalog rules over Chat Completions (an openai_compat instance serving OpenAI's models) ---


def _catalog(model_id: str) -> ModelInfo:
    from trunkline.config.catalog import Catalog

    return Catalog.load(providers=["openai"]).resolve(model_id)


def test_a_reasoning_model_gets_no_sampling_and_never_the_legacy_max_tokens():
    gpt5 = _catalog("openai:gpt-5")
    built = build(
        Request(model=gpt5.id, messages=[Message.user("x")], temperature=0.2, top_p=0.5, max_tokens=99, seed=1),
        gpt5,
        provider="openai",
        wire_ids={},
        stream=False,
        instance={"legacy_max_tokens": True},
    )
    assert built.body == {
        "model": "gpt-5",
        "messages": [{"role": "user", "content": "x"}],
        "max_completion_tokens": 99,
        "seed": 1,
    }
    assert [w.message for w in built.warnings] == [
        (
            "openai:gpt-5 is a reasoning model, which refuses the legacy max_tokens; max_completion_tokens was sent "
            "instead"
        ),
        "openai:gpt-5 does not take temperature (rule `sampling`); it was left out",
        "openai:gpt-5 does not take top_p (rule `sampling`); it was left out",
    ]


def test_sampling_only_with_effort_none_follows_the_rule():
    sol = _catalog("openai:gpt-6-sol")

    def sent(**fields):
        return build(
            Request(model=sol.id, messages=[Message.user("x")], temperature=0.3, **fields),
            sol,
            provider="openai",
            wire_ids={},
            stream=False,
            instance={},
        )

    assert sent(reasoning_effort="none").body["temperature"] == 0.3
    assert sent().body["temperature"] == 0.3  # GPT-6 Sol's default effort is none
    high = sent(reasoning_effort="high")
    assert "temperature" not in high.body and high.body["reasoning_effort"] == "high"
    assert "rule `sampling_needs_no_reasoning`" in high.warnings[0].message


def test_function_tools_over_chat_completions_follow_the_endpoint_rule():
    tools = [Tool(name="get-weather")]
    astra = _catalog("openai:gpt-6-astra")
    with pytest.raises(ProviderError, match=r"takes no function tools over Chat Completions") as info:
        build(
            Request(model=astra.id, messages=[Message.user("x")], tools=tools),
            astra,
            provider="openai",
            wire_ids={},
            stream=False,
            instance={},
        )
    assert info.value.error_class == "invalid_request"
    luna = _catalog("openai:gpt-6-luna")
    with pytest.raises(ProviderError, match=r"only with reasoning_effort none"):
        build(
            Request(model=luna.id, messages=[Message.user("x")], tools=tools, reasoning_effort="low"),
            luna,
            provider="openai",
            wire_ids={},
            stream=False,
            instance={},
        )
    ok = build(
        Request(model=luna.id, messages=[Message.user("x")], tools=tools, reasoning_effort="none"),
        luna,
        provider="openai",
        wire_ids={},
        stream=False,
        instance={},
    )
    assert ok.body["tools"][0]["function"]["name"] == "get-weather"


def _data(content: str | None = None, finish: str | None = None) -> bytes:
    return json.dumps(
        {
            "id": "c",
            "model": "m",
            "choices": [
                {"index": 0, "delta": {} if content is None else {"content": content}, "finish_reason": finish}
            ],
        }
    ).encode()


def test_a_stream_that_stops_before_its_end_is_a_network_error():
    stream = ChatStream()
    stream.feed(_data("half an "))
    stream.feed(_data("answer"))
    with pytest.raises(ProviderError) as caught:
        stream.finish()
    assert caught.value.error_class == "network" and "[DONE]" in caught.value.message


@pytest.mark.parametrize("ending", [[_data(finish="stop")], [b"[DONE]"], [_data(finish="length"), b"[DONE]"]])
def test_a_finish_reason_or_done_ends_a_stream(ending):
    stream = ChatStream()
    stream.feed(_data("whole"))
    for data in ending:
        stream.feed(data)
    skeleton = stream.finish().response
    assert skeleton.finish_reason.reason in ("stop", "length", "other")
