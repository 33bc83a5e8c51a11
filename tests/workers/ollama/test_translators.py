"""Ollama translators: canonical -> /api/chat JSON, NDJSON -> canonical events, errors; recorded traffic."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx
import pytest

from helpers import REPO, check_invariants, through_pipeline
from trunkline.protocol.codec import decode_event, split_frame
from trunkline.protocol.messages import (
    ErrorEvent,
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
    ToolCallEnd,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from trunkline.workers._emit import Emitter
from trunkline.workers.ollama import errors
from trunkline.workers.ollama.request import build
from trunkline.workers.ollama.stream import OllamaStream
from trunkline.workers.openai_compat.response import parse as parse_chat

MODEL = ModelInfo(id="ollama:qwen3:8b", provider="ollama", wire_name="qwen3:8b", reasoning=True)
RECORDINGS = REPO.parent / "shared" / "recordings" / "ollama"
CASSETTES = REPO / "cassettes" / "ollama"
WEATHER = Tool(name="weather", description="Weather", parameters={"type": "object", "properties": {}})


def body(*messages, stream=True, **fields):
    return build(Request(model=MODEL.id, messages=list(messages), **fields), MODEL, provider="ollama", stream=stream)


def test_messages_images_tools_and_results():
    call = ToolCallPart(id="tu_1", name="weather", arguments={"city": "Oslo"}, provider_id="call_x")
    built = body(
        Message.system("Be brief."),
        Message.user("Weather here?", ImagePart(data="aGk=", media_type="image/png")),
        Message(role="assistant", content=[ThinkingPart(text="hmm"), call]),
        Message(role="tool", content=[ToolResultPart(tool_call_id="tu_1", content="-3°C")]),
        Message(role="tool", content=[ToolResultPart(tool_call_id="tu_1", content="again", is_error=True)]),
        tools=[WEATHER],
    )
    assert built.body == {
        "model": "qwen3:8b",
        "stream": True,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather here?", "images": ["aGk="]},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Oslo"}}}],
            },
            {"role": "tool", "content": "-3°C", "tool_name": "weather"},
            {"role": "tool", "content": "ERROR: again", "tool_name": "weather"},
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
    }
    assert [w.code for w in built.warnings] == ["thinking_dropped"]


def test_image_urls_cannot_be_sent_and_say_so():
    built = body(Message.user("x", ImagePart(url="https://x/y.png")))
    assert "images" not in built.body["messages"][0] and built.warnings[0].code == "unsupported_content"


def test_tool_choice_none_drops_tools_and_forcing_is_a_warning_not_a_pretence():
    assert "tools" not in body(Message.user("x"), tools=[WEATHER], tool_choice=ToolChoice(mode="none")).body
    forced = body(Message.user("x"), tools=[WEATHER], tool_choice=ToolChoice(mode="tool", name="weather"))
    assert "tools" in forced.body and "tool_choice" not in forced.body
    assert forced.warnings[0].code == "tool_choice_unsupported" and "cannot force" in forced.warnings[0].message
    required = body(Message.user("x"), tools=[WEATHER], tool_choice=ToolChoice(mode="required"))
    assert required.warnings[0].code == "tool_choice_unsupported"


GPT_OSS = ModelInfo(
    id="ollama:gpt-oss:20b", provider="ollama", wire_name="gpt-oss:20b", reasoning=True, in_catalog=False
)


@pytest.mark.parametrize(
    ("effort", "think", "warned"),
    [
        ("low", "low", False),
        ("medium", "medium", False),
        ("high", "high", False),
        ("xhigh", "high", True),
        ("minimal", "low", True),
        ("none", "low", True),
    ],
)
def test_think_is_a_level_for_models_that_take_levels(effort, think, warned):
    built = build(
        Request(model="ollama:gpt-oss:20b", messages=[Message.user("x")], reasoning_effort=effort),
        GPT_OSS,
        provider="ollama",
        stream=True,
    )
    assert built.body["think"] == think
    assert [w.code for w in built.warnings] == (["unsupported_setting"] if warned else [])
    if warned:
        assert f"reasoning_effort {effort} was sent as {think}" in built.warnings[0].message


def test_think_stays_a_boolean_elsewhere():
    for effort, think in (("high", True), ("low", True), ("none", False)):
        assert body(Message.user("x"), reasoning_effort=effort).body["think"] is think


def test_options_format_think_and_keep_alive():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    built = body(
        Message.user("x"),
        temperature=0.0,
        top_p=0.9,
        seed=7,
        max_tokens=50,
        stop_sequences=["\n\n"],
        response_format=ResponseFormat(kind="json_schema", schema=schema),
        reasoning_effort="high",
        provider_options={"ollama": {"keep_alive": "10m", "options": {"num_ctx": 8192}}},
    )
    b = built.body
    assert b["options"] == {
        "temperature": 0.0,
        "top_p": 0.9,
        "seed": 7,
        "num_predict": 50,
        "stop": ["\n\n"],
        "num_ctx": 8192,
    }
    assert b["format"] == schema and b["think"] is True and b["keep_alive"] == "10m"
    assert body(Message.user("x"), reasoning_effort="none").body["think"] is False
    assert body(Message.user("x"), response_format=ResponseFormat(kind="json_object")).body["format"] == "json"
    assert body(Message.user("x"), stream=False).body["stream"] is False


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
    emitter = Emitter(job, "ollama", lambda rid, f, seq, t: frames.extend(f), lambda pid: f"tu_{next(counter)}")
    through_pipeline(chunks, OllamaStream(), "ndjson", emitter, "ollama")
    return [decode_event(split_frame(f)[1]) for f in frames]


def chunkings(data: bytes) -> list[list[bytes]]:
    rng = random.Random(len(data))
    cuts = sorted(rng.sample(range(1, len(data)), min(50, len(data) - 1)))
    return [
        [data],
        [data[i : i + 1] for i in range(len(data))],
        [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)],
    ]


@pytest.mark.parametrize("chunking", range(3))
def test_thinking_text_and_whole_tool_calls(chunking):
    events = run(chunkings((CASSETTES / "think-tools.ndjson").read_bytes())[chunking])
    check_invariants(events)
    response = events[-1].response
    assert response.message.content[0].text == "Need the weather."
    assert response.text == "Checking Oslo."
    calls = response.tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("weather", {"city": "Oslo"}), ("time", {})]
    assert all(c.id.startswith("tu_") for c in calls) and calls[0].provider_id is None
    deltas = [e.partial_json for e in events if type(e) is ToolCallDelta]
    assert [json.loads(d) for d in deltas] == [{"city": "Oslo"}, {}]
    assert response.finish_reason.reason == "tool_calls" and response.finish_reason.raw == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (31, 18)
    # eval_count counts the thinking too, and Ollama does not say how much of it: estimated
    assert 0 < response.usage.reasoning_tokens < 18 and response.usage.estimated_fields == ["reasoning_tokens"]


def test_the_prompt_tokens_found_in_the_kv_cache_are_cache_reads():
    line = {"model": "m", "message": {"role": "assistant", "content": "ok"}, "done": True, "done_reason": "stop"}
    counts = {"prompt_eval_count": 2050, "prompt_eval_cached_count": 1800, "eval_count": 7}
    response = run([json.dumps({**line, **counts}).encode() + b"\n"])[-1].response
    assert (response.usage.input_tokens, response.usage.cache_read_tokens, response.usage.output_tokens) == (
        2050,
        1800,
        7,
    )
    assert not response.usage.estimated  # nothing thought, nothing estimated


def test_a_server_that_buffers_everything_into_one_object():
    whole = json.dumps(
        {
            "model": "m",
            "message": {"role": "assistant", "content": "all at once"},
            "done": True,
            "done_reason": "length",
            "prompt_eval_count": 3,
            "eval_count": 4,
        }
    ).encode()
    events = run([whole])  # no newline at all
    check_invariants(events)
    assert events[-1].response.text == "all at once" and events[-1].response.finish_reason.reason == "length"


def test_error_line_mid_stream():
    data = b'{"model":"m","message":{"content":"par"},"done":false}\n{"error":"model runner crashed"}\n'
    events = run([data])
    check_invariants(events)
    assert type(events[-1]) is ErrorEvent and "model runner crashed" in events[-1].error.message
    assert events[-1].partial.text == "par"


def test_stream_cut_before_done():
    events = run([b'{"model":"m","message":{"content":"par"},"done":false}\n'])
    assert type(events[-1]) is ErrorEvent and events[-1].error.error_class == "network"


def recorded_ndjson() -> list[Path]:
    out = []
    for case in sorted(RECORDINGS.glob("*/*")) if RECORDINGS.exists() else []:
        meta = json.loads((case / "meta.json").read_text())
        if meta.get("stream_kind") == "ndjson":
            out.append(case)
    return out


@pytest.mark.skipif(not RECORDINGS.exists(), reason="../shared/recordings is not present")
@pytest.mark.parametrize("case", recorded_ndjson(), ids=lambda p: p.name[-45:])
def test_recorded_ndjson(case):
    data = (case / "response.body").read_bytes()
    lines = [json.loads(line) for line in data.splitlines() if line.strip()]
    expected_text = "".join(line["message"]["content"] for line in lines)
    for chunks in chunkings(data):
        events = run(chunks)
        check_invariants(events)
        assert type(events[-1]) is Finish
        response = events[-1].response
        assert response.text == expected_text
        assert "".join(e.text for e in events if type(e) is TextDelta) == expected_text
        assert response.usage.input_tokens == lines[-1]["prompt_eval_count"]
        assert response.usage.output_tokens == lines[-1]["eval_count"]
        assert response.finish_reason.raw == lines[-1]["done_reason"]


@pytest.mark.skipif(not RECORDINGS.exists(), reason="../shared/recordings is not present")
def test_recorded_openai_compatible_answers_from_ollama():
    """Ollama's /v1 endpoint answers in the OpenAI shape, with `reasoning` beside the content."""
    checked = 0
    for case in sorted(RECORDINGS.glob("*/*")):
        request = json.loads((case / "request.json").read_text())
        if "/v1/chat/completions" not in request["url"]:
            continue
        body_ = json.loads((case / "response.body").read_text())
        response, reported = parse_chat(body_)
        message = body_["choices"][0]["message"]
        assert reported and response.usage.input_tokens == body_["usage"]["prompt_tokens"]
        if message.get("reasoning"):
            assert response.message.content[0].text == message["reasoning"]
        if message.get("content"):
            assert response.text == message["content"]
        checked += 1
    assert checked == 3


def test_recorded_400_error():
    case = RECORDINGS / "tmc+langchaingo" / "llms__ollama__testdata__TestToolCall"
    if not case.exists():
        pytest.skip("../shared/recordings is not present")
    err = errors.classify(400, httpx.Headers(), (case / "response.body").read_bytes())
    assert err.error_class == "invalid_request" and "does not support tools" in err.message


def test_model_not_found():
    err = errors.classify(404, httpx.Headers(), b'{"error":"model \\"llama9\\" not found, try pulling it first"}')
    assert err.error_class == "not_found" and "llama9" in err.message


def test_ids_in_ollama_cloud_tool_calls_are_kept():
    line = (
        json.dumps(
            {
                "model": "gpt-oss",
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": "call_mo1wm122", "function": {"index": 0, "name": "f", "arguments": {"a": 1}}}
                    ],
                },
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 1,
                "eval_count": 1,
            }
        ).encode()
        + b"\n"
    )
    events = run([line])
    end = next(e for e in events if type(e) is ToolCallEnd)
    assert end.provider_id == "call_mo1wm122" and end.arguments == {"a": 1}
