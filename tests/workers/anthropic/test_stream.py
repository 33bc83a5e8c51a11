"""Anthropic SSE -> canonical events: our cassettes and every recorded Anthropic stream, under hostile chunking."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from helpers import REPO, check_invariants, through_pipeline
from trunkline.protocol.codec import decode_event, split_frame
from trunkline.protocol.messages import (
    ErrorEvent,
    Finish,
    Job,
    Message,
    ModelInfo,
    ProviderEvent,
    ProviderPart,
    ProviderPartEvent,
    ReasoningEnd,
    Request,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
)
from trunkline.workers._emit import Emitter
from trunkline.workers.anthropic.stream import AnthropicStream

CASSETTES = REPO / "cassettes" / "anthropic"
RECORDINGS = REPO.parent / "shared" / "recordings" / "anthropic"
MODEL = ModelInfo(id="anthropic:claude-sonnet-4-5", provider="anthropic", wire_name="claude-sonnet-4-5")


def chunkings(data: bytes) -> list[list[bytes]]:
    rng = random.Random(len(data))
    cuts = sorted(rng.sample(range(1, len(data)), min(40, len(data) - 1)))
    randomly = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return [
        [data],
        [data[i : i + 1] for i in range(len(data))],
        [data[i : i + 7] for i in range(0, len(data), 7)],
        randomly,
    ]


def run(chunks: list[bytes], passthrough: bool = False) -> list:
    """Bytes through the SSE decoder, the translator and the real emitter, as the worker runs them."""
    frames: list[bytes] = []
    job = Job(
        request_id="r",
        client_id="c",
        operation_id="o",
        model=MODEL,
        request=Request(model=MODEL.id, messages=[Message.user("x")]),
    )
    counter = iter(range(100))
    emitter = Emitter(job, "anthropic", lambda rid, f, seq, t: frames.extend(f), lambda pid: f"tu_{next(counter)}")
    through_pipeline(chunks, AnthropicStream(passthrough=passthrough), "sse", emitter, "anthropic")
    return [decode_event(split_frame(f)[1]) for f in frames]


@pytest.mark.parametrize("chunking", range(4))
def test_parallel_tool_calls(chunking):
    data = (CASSETTES / "tools-parallel.sse").read_bytes()
    events = run(chunkings(data)[chunking])
    check_invariants(events)
    response = events[-1].response
    assert response.text == "I'll check both — Paris and Tōkyō."
    calls = response.tool_calls
    assert [(c.name, c.arguments, c.provider_id) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "°C"}, "toolu_01Paris"),
        ("current_time", {}, "toolu_02Clock"),
    ]
    # fragments pass through verbatim; the empty first fragment carries nothing and is not sent
    assert [e.partial_json for e in events if type(e) is ToolCallDelta] == ['{"city": ', '"Paris", "unit": "°C"}']
    assert response.finish_reason.reason == "tool_calls"
    u = response.usage
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (800, 380, 89)  # 420 + 380 cached
    assert response.id == "msg_tools" and response.model == "claude-sonnet-4-5-20250929"


@pytest.mark.parametrize("chunking", range(4))
def test_thinking_signature_and_redacted_thinking(chunking):
    events = run(chunkings((CASSETTES / "thinking.sse").read_bytes())[chunking])
    check_invariants(events)
    ends = [e for e in events if type(e) is ReasoningEnd]
    assert ends[0].text == "Two plus two is four." and ends[0].signature == "EqQBCkgIARABGAIiQL+sig=="
    assert ends[1].redacted_data == "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"
    response = events[-1].response
    parts = response.message.content
    assert parts[0].signature == "EqQBCkgIARABGAIiQL+sig==" and parts[0].provider == "anthropic"
    assert parts[1].data == "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT" and parts[1].provider == "anthropic"
    # Each reasoning part records the model that wrote it (some models accept only their own back).
    assert response.model and parts[0].model == parts[1].model == response.model
    assert response.text == "4"
    assert response.finish_reason.reason == "stop" and response.finish_reason.stop_sequence == "\n\nHuman:"
    # message_delta's totals replace message_start's: output 120, of which 100 thinking (reported)
    assert (response.usage.output_tokens, response.usage.reasoning_tokens) == (120, 100)
    assert not response.usage.estimated


@pytest.mark.parametrize("chunking", range(4))
def test_error_event_mid_stream_ends_with_the_partial(chunking):
    events = run(chunkings((CASSETTES / "overloaded-midstream.sse").read_bytes())[chunking])
    check_invariants(events)
    last = events[-1]
    assert type(last) is ErrorEvent
    assert (last.error.error_class, last.error.retryable, last.error.provider_code) == (
        "rate_limit",
        True,
        "overloaded_error",
    )
    assert last.partial.text == "Partial answer"
    cut = next(e for e in events if type(e) is ToolCallEnd)
    assert cut.arguments == {} and cut.raw_arguments == '{"q": "ha'


@pytest.mark.parametrize("chunking", range(4))
def test_server_tool_blocks_and_the_container_become_provider_parts_in_order(chunking):
    events = run(chunkings((CASSETTES / "unknown-types.sse").read_bytes())[chunking])
    check_invariants(events)
    parts = [e for e in events if type(e) is ProviderPartEvent]
    # the server tool's input arrives in input_json_delta pieces: one event, at its stop, with the whole block
    assert [(e.index, e.kind, e.data) for e in parts] == [
        (
            0,
            "server_tool_use",
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
        ),
        (1, "web_search_tool_result", {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}),
        (3, "container", {"id": "c1", "expires_at": "2026-11-22T00:00:00Z"}),
    ]
    assert all(e.api == "anthropic" and e.model is None for e in parts)  # Anthropic ties none to the model
    response = events[-1].response
    assert [type(p).__name__ for p in response.message.content] == [
        "ProviderPart",
        "ProviderPart",
        "TextPart",
        "ProviderPart",
    ]
    assert all(p.provider == "anthropic" for p in response.message.content if type(p) is ProviderPart)
    assert response.text == "Found it." and not response.tool_calls
    assert response.finish_reason.reason == "other" and response.finish_reason.raw == "pause_turn"
    assert not any(type(e) is ProviderEvent for e in events)


def test_events_we_do_not_translate_pass_through_when_asked():
    events = run([(CASSETTES / "unknown-types.sse").read_bytes()], passthrough=True)
    kinds = [e.event_type for e in events if type(e) is ProviderEvent]
    assert kinds == ["shiny_future_event", "content_block_delta"]  # the citation delta


def test_a_server_tool_input_that_is_not_json_is_an_invalid_response():
    data = (CASSETTES / "unknown-types.sse").read_bytes().replace(b'"{\\"query\\":\\"x\\"}"', b'"{\\"qu"')
    assert b'"partial_json":"{\\"qu"' in data
    events = run([data])
    assert type(events[-1]) is ErrorEvent and events[-1].error.error_class == "invalid_response"
    assert "server_tool_use" in events[-1].error.message


def test_a_stream_cut_before_message_stop_is_an_error_with_the_partial():
    data = (CASSETTES / "tools-parallel.sse").read_bytes()
    events = run([data[: data.index(b'event: content_block_start\ndata: {"type":"content_block_start","index":2')]])
    check_invariants(events)
    assert type(events[-1]) is ErrorEvent and events[-1].error.error_class == "network"
    assert events[-1].partial.tool_calls[0].arguments == {"city": "Paris", "unit": "°C"}


def test_garbage_data_is_an_invalid_response():
    events = run([b"event: message_start\ndata: {not json\n\n"])
    assert [type(e) for e in events] == [ErrorEvent] and events[0].error.error_class == "invalid_response"


# -- every recorded Anthropic stream -----------------------------------------------


def recorded_streams() -> list[Path]:
    if not RECORDINGS.exists():
        return []
    out = []
    for case in sorted(RECORDINGS.glob("*/*")):
        meta = json.loads((case / "meta.json").read_text())
        if meta.get("stream_kind") == "sse" and (meta.get("status") or 200) == 200:
            out.append(case)
    return out


def naive_expectations(data: bytes) -> dict:
    """What the recording says, read without any of our code: text per block, tool inputs, final usage."""
    texts: dict[int, str] = {}
    tools: dict[int, str] = {}
    kinds: dict[int, str] = {}
    opaque: dict[int, dict] = {}  # blocks of no canonical type, as they started
    inputs: dict[int, str] = {}
    usage: dict = {}
    stop = None
    container = None
    for block in data.decode().replace("\r\n", "\n").split("\n\n"):
        payload = "".join(line[5:].lstrip() for line in block.split("\n") if line.startswith("data:"))
        if not payload:
            continue
        p = json.loads(payload)
        t = p.get("type")
        if t == "message_start":
            usage = dict(p["message"].get("usage") or {})
        elif t == "content_block_start":
            kinds[p["index"]] = p["content_block"]["type"]
            if p["content_block"]["type"] == "text":
                texts[p["index"]] = p["content_block"].get("text", "")
            if p["content_block"]["type"] == "tool_use":
                tools[p["index"]] = ""
            if p["content_block"]["type"] not in ("text", "thinking", "redacted_thinking", "tool_use"):
                opaque[p["index"]] = dict(p["content_block"])
                inputs[p["index"]] = ""
        elif t == "content_block_delta":
            d = p["delta"]
            if d["type"] == "text_delta" and kinds.get(p["index"]) == "text":
                texts[p["index"]] += d["text"]
            elif d["type"] == "input_json_delta" and kinds.get(p["index"]) == "tool_use":
                tools[p["index"]] += d["partial_json"]
            elif d["type"] == "input_json_delta" and p["index"] in opaque:
                inputs[p["index"]] += d["partial_json"]
            elif d["type"] == "compaction_delta":
                block = opaque[p["index"]]
                block["content"] = (block.get("content") or "") + d["content"]
        elif t == "message_delta":
            stop = p["delta"].get("stop_reason")
            container = p["delta"].get("container") or container
            usage.update({k: v for k, v in (p.get("usage") or {}).items() if v is not None})
    for i, raw in inputs.items():
        if raw:
            opaque[i]["input"] = json.loads(raw)
    provider = [(opaque[i]["type"], opaque[i]) for i in sorted(opaque)]
    if container:
        provider.append(("container", container))
    return {
        "text": "".join(texts[i] for i in sorted(texts)),
        "tools": [json.loads(tools[i]) if tools[i] else {} for i in sorted(tools)],
        "provider": provider,
        "usage": usage,
        "stop": stop,
    }


@pytest.mark.skipif(not RECORDINGS.exists(), reason="../shared/recordings/anthropic is not present")
@pytest.mark.parametrize("case", recorded_streams(), ids=lambda p: p.name[-60:])
def test_recorded_stream(case: Path):
    data = (case / "response.body").read_bytes()
    expected = naive_expectations(data)
    results = []
    for chunks in chunkings(data):
        events = run(chunks)
        check_invariants(events)
        last = events[-1]
        assert type(last) is Finish, last
        results.append(last.response)
        response = last.response
        assert response.text == expected["text"]
        assert "".join(e.text for e in events if type(e) is TextDelta) == expected["text"]
        assert [c.arguments for c in response.tool_calls] == expected["tools"]
        # every block with no canonical type, whole and in order, in the stream and the response
        assert [(e.kind, e.data) for e in events if type(e) is ProviderPartEvent] == expected["provider"]
        assert [(p.kind, p.data) for p in response.message.content if type(p) is ProviderPart] == expected["provider"]
        u, raw = response.usage, expected["usage"]
        # compaction steps are billed beside the message: `iterations` holds them all
        billed = raw.get("iterations") or [raw]
        read = sum(it.get("cache_read_input_tokens") or 0 for it in billed)
        cached = read + sum(it.get("cache_creation_input_tokens") or 0 for it in billed)
        assert u.input_tokens == sum(it["input_tokens"] for it in billed) + cached
        assert u.output_tokens == sum(it["output_tokens"] for it in billed)
        assert u.cache_read_tokens == read
        assert response.finish_reason.raw == expected["stop"]
    assert all(r.message == results[0].message for r in results)  # any chunking, the same response


def _sse(*events: dict) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


@pytest.mark.parametrize("chunking", range(4))
def test_tool_arguments_that_are_not_json_stay_a_call_the_loop_can_answer(chunking):
    data = _sse(
        {
            "type": "message_start",
            "message": {
                "id": "msg_bad",
                "model": "claude-sonnet-4-5",
                "usage": {"input_tokens": 10, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_bad", "name": "get_weather", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"city": "Par'},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    )
    events = run(chunkings(data)[chunking])
    check_invariants(events)
    response = events[-1].response
    (call,) = response.tool_calls
    assert call.arguments is None and call.raw_arguments == '{"city": "Par' and call.provider_id == "toolu_bad"
    assert response.finish_reason.reason == "tool_calls" and response.usage.output_tokens == 7
    (warning,) = [w for w in response.warnings if w.code == "tool_arguments_invalid"]
    assert "get_weather" in warning.message and '{"city": "Par' in warning.message
