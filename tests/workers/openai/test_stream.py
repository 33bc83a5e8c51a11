"""Responses SSE -> canonical events: every shared recording, under hostile chunking, through
the SSE decoder, the translator and the real emitter, as the worker runs them."""

from __future__ import annotations

import json
import random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import REPO, check_invariants, through_pipeline
from trunkline.protocol.codec import decode_event, split_frame
from trunkline.protocol.messages import (
    ErrorEvent,
    Finish,
    Job,
    Message,
    ModelInfo,
    ModelRules,
    ProviderEvent,
    ProviderPart,
    ProviderPartEvent,
    ReasoningDelta,
    Request,
    TextPart,
    ThinkingPart,
    ToolCallDelta,
    ToolCallPart,
)
from trunkline.workers._emit import Emitter
from trunkline.workers.openai import response as wire_response
from trunkline.workers.openai.stream import ResponsesStream

RECORDINGS = REPO.parent / "shared" / "recordings" / "openai-responses"
MODEL = ModelInfo(id="openai:gpt-5", provider="openai", wire_name="gpt-5", reasoning=True)


def _streams() -> list[tuple[str, bytes]]:
    """(name, body) of every recorded stream; a file holding several responses one after
    another (vercel's multi-turn fixture) is split at each `response.created`."""
    out = []
    for meta_path in sorted(RECORDINGS.glob("*/*/meta.json")):
        if not json.loads(meta_path.read_text())["stream"]:
            continue
        body = (meta_path.parent / "response.body").read_bytes()
        name = meta_path.parent.name.split("__")[-1]
        marker = b"event: response.created"
        pieces = [marker + p for p in body.split(marker)[1:]] if body.startswith(marker) else [body]
        out += [(f"{name}#{i}" if len(pieces) > 1 else name, p) for i, p in enumerate(pieces)]
    return out


STREAMS = dict(_streams())


def recorded(name: str) -> bytes:
    if not STREAMS:
        pytest.skip("../shared/recordings is not present; cassettes/ covers the same forms")
    return STREAMS[name]


def chunkings(data: bytes) -> list[list[bytes]]:
    rng = random.Random(len(data))
    cuts = sorted(rng.sample(range(1, len(data)), min(60, len(data) - 1)))
    randomly = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return [
        [data],
        [data[i : i + 1] for i in range(len(data))],
        [data[i : i + 7] for i in range(0, len(data), 7)],
        randomly,
    ]


def run(chunks: list[bytes], passthrough: bool = False, model: ModelInfo = MODEL) -> list:
    frames: list[bytes] = []
    job = Job(
        request_id="r",
        client_id="c",
        operation_id="o",
        model=model,
        request=Request(model=model.id, messages=[Message.user("x")]),
    )
    counter = iter(range(1000))
    emitter = Emitter(job, "openai", lambda rid, f, seq, t: frames.extend(f), lambda pid: f"tu_{next(counter)}")
    through_pipeline(chunks, ResponsesStream(model, passthrough=passthrough), "sse", emitter, "openai")
    events = [decode_event(split_frame(f)[1]) for f in frames]
    last = events[-1]
    ending = last.response if type(last) is Finish else last.partial
    if ending is not None:
        ending.latency_ms = 0.0  # the one figure that depends on the clock, not on the bytes
    return events


def completed_response(body: bytes) -> dict | None:
    for line in body.decode().splitlines():
        if line.startswith("data:") and '"response.completed"' in line:
            return json.loads(line[5:])["response"]
    return None


def shape(parts: list) -> list:
    """What a user compares between a streamed and a non-streamed response."""
    out = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append(("text", p.text))
        elif isinstance(p, ThinkingPart):
            out.append(("thinking", p.text))
        elif isinstance(p, ToolCallPart):
            out.append(("call", p.name, p.arguments, p.provider_id))
        elif isinstance(p, ProviderPart):
            # OpenAI encrypts the same reasoning afresh for `output_item.done` and for
            # `response.completed` (vercel's recording shows two different ciphertexts).
            data = {k: (bool(v) if k == "encrypted_content" else v) for k, v in p.data.items()}
            out.append(("opaque", p.api, p.kind, json.dumps(data, sort_keys=True)))
    return out


@pytest.mark.parametrize("chunking", range(4))
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_every_recording_streams_as_its_final_response_says(name, chunking):
    body = STREAMS[name]
    events = run(chunkings(body)[chunking])
    check_invariants(events)
    assert events == run([body]), "the events depend on where the bytes were cut"
    final = completed_response(body)
    if final is None:
        assert type(events[-1]) is ErrorEvent
        return
    response = events[-1].response
    expected = wire_response.parse(final, MODEL)
    # The stream and the response object it ends with tell the same story, part for part.
    assert shape(response.message.content) == shape(expected.message.content)
    assert response.usage == expected.usage and response.finish_reason == expected.finish_reason
    assert response.id == final["id"]


def test_function_call_deltas_are_mapped_to_the_call_id_and_phase_is_kept():
    events = run(chunkings(recorded("test_openai_responses_phase_streamed_on_part_start.0"))[3])
    response = events[-1].response
    marker, text, call = response.message.content[1:]
    assert marker.kind == "message" and marker.data["phase"] == "commentary"
    assert text.text == "I\u2019ll check the capital lookup tool for \u201cPotatoLand.\u201d"
    assert (call.name, call.arguments, call.provider_id) == (
        "get_capital",
        {"country": "PotatoLand"},
        "call_LabG58Uhrq9kZvR52BYKjToD",
    )
    assert call.id.startswith("tu_")  # the canonical id, not fc_ or call_
    assert "".join(e.partial_json for e in events if type(e) is ToolCallDelta) == '{"country":"PotatoLand"}'
    assert response.finish_reason.reason == "tool_calls"


def test_reasoning_summaries_are_parts_and_the_item_is_kept_for_the_next_turn():
    events = run(chunkings(recorded("test_openai_responses_thinking_part_iter"))[2])
    response = events[-1].response
    thinking = [p for p in response.message.content if isinstance(p, ThinkingPart)]
    assert len(thinking) == 4 and all(t.text for t in thinking)
    assert "".join(e.text for e in events if type(e) is ReasoningDelta) == "".join(t.text for t in thinking)
    item = next(p for p in response.message.content if isinstance(p, ProviderPart))
    assert item.kind == "reasoning" and item.data["id"].startswith("rs_") and len(item.data["summary"]) == 4
    assert response.usage.reasoning_tokens == 1408 and response.usage.output_tokens == 1680


def test_encrypted_reasoning_is_carried_verbatim():
    events = run(chunkings(recorded("openai-reasoning-encrypted-content.1.chunks#0"))[3])
    item = next(e for e in events if type(e) is ProviderPartEvent)
    assert item.api == "openai" and item.kind == "reasoning" and item.data["encrypted_content"].startswith("gAAAAA")
    assert item.model is None  # gpt-5's rules do not tie reasoning to the model
    tied = ModelInfo(
        id="openai:gpt-6-sol",
        provider="openai",
        wire_name="gpt-6-sol",
        reasoning=True,
        rules=ModelRules(thinking_tied_to_model=True),
    )
    tied_events = run([recorded("openai-reasoning-encrypted-content.1.chunks#0")], model=tied)
    assert next(e for e in tied_events if type(e) is ProviderPartEvent).model == "gpt-6-sol"


def test_built_in_tools_are_opaque_parts_never_client_tool_calls():
    events = run(chunkings(recorded("openai-web-search-tool.1.chunks"))[3])
    response = events[-1].response
    assert response.tool_calls == [] and response.finish_reason.reason == "stop"
    kinds = [p.kind for p in response.message.content if isinstance(p, ProviderPart)]
    assert kinds.count("web_search_call") == 6 and kinds.count("reasoning") == 7
    u = response.usage
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens) == (31073, 3712, 4416, 3712)
    code = run([recorded("openai-code-interpreter-tool.1.chunks")])[-1].response
    assert [p.kind for p in code.message.content if isinstance(p, ProviderPart)].count("code_interpreter_call") == 3
    mcp = run([recorded("openai-mcp-tool-approval.1.chunks")])[-1].response
    assert [p.kind for p in mcp.message.content] == ["mcp_list_tools", "reasoning", "mcp_approval_request"]


def test_an_error_inside_a_200_stream_ends_it_with_that_error():
    events = run(chunkings(recorded("openai-error.1.chunks"))[1])
    assert len(events) == 1 and type(events[0]) is ErrorEvent
    error = events[0].error
    assert error.error_class == "quota_exceeded" and error.provider_code == "insufficient_quota"
    assert "exceeded your current quota" in error.message


def test_a_resumed_stream_needs_no_created_event():
    first = run([recorded("test_background_mode_streaming_starting_after_vcr.0")])[-1].response
    resumed = run(chunkings(recorded("test_background_mode_streaming_starting_after_vcr.1"))[1])
    check_invariants(resumed)
    assert resumed[-1].response.text == first.text and first.text


def sse(*payloads: dict) -> bytes:
    return b"".join(f"event: {p['type']}\ndata: {json.dumps(p)}\n\n".encode() for p in payloads)


CREATED = {
    "type": "response.created",
    "sequence_number": 0,
    "response": {"id": "resp_1", "model": "gpt-5", "status": "in_progress", "output": []},
}


def completed(status="completed", output=(), incomplete=None, seq=9):
    return {
        "type": f"response.{status if status != 'failed' else 'failed'}",
        "sequence_number": seq,
        "response": {
            "id": "resp_1",
            "model": "gpt-5",
            "status": status,
            "output": list(output),
            "incomplete_details": incomplete,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 2},
                "output_tokens_details": {"reasoning_tokens": 3},
            },
        },
    }


def test_parallel_function_calls_interleaved():
    calls = [
        {
            "type": "response.output_item.added",
            "output_index": i,
            "sequence_number": 1 + i,
            "item": {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": n, "arguments": ""},
        }
        for i, n in enumerate(["weather", "time"])
    ]
    deltas = [
        {
            "type": "response.function_call_arguments.delta",
            "item_id": f"fc_{i}",
            "output_index": i,
            "delta": d,
            "sequence_number": 3 + k,
            "obfuscation": "zz",
        }
        for k, (i, d) in enumerate([(0, '{"city":'), (1, "{}"), (0, '"Paris"}')])
    ]
    dones = [
        {
            "type": "response.output_item.done",
            "output_index": i,
            "sequence_number": 6 + i,
            "item": {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": n, "arguments": a},
        }
        for i, (n, a) in enumerate([("weather", '{"city":"Paris"}'), ("time", "{}")])
    ]
    body = sse(CREATED, *calls, *deltas, *dones, completed(seq=8))
    for chunks in chunkings(body):
        events = run(chunks)
        check_invariants(events)
        response = events[-1].response
        assert [(c.name, c.arguments, c.provider_id) for c in response.tool_calls] == [
            ("weather", {"city": "Paris"}, "call_0"),
            ("time", {}, "call_1"),
        ]
        assert response.finish_reason.reason == "tool_calls"
        u = response.usage
        assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens) == (10, 4, 2, 3)


def test_status_becomes_the_finish_reason():
    text_item = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
    }
    length = run([sse(CREATED, completed("incomplete", [text_item], {"reason": "max_output_tokens"}, seq=1))])
    assert length[-1].response.finish_reason.reason == "length" and length[-1].response.text == "Hi"
    filtered = run([sse(CREATED, completed("incomplete", [], {"reason": "content_filter"}, seq=1))])
    assert filtered[-1].response.finish_reason.reason == "content_filter"
    refusal = {"type": "message", "id": "msg_2", "role": "assistant", "content": []}
    refused = run(
        [
            sse(
                CREATED,
                {"type": "response.output_item.added", "output_index": 0, "item": refusal, "sequence_number": 1},
                {
                    "type": "response.content_part.added",
                    "item_id": "msg_2",
                    "output_index": 0,
                    "content_index": 0,
                    "part": {"type": "refusal", "refusal": ""},
                    "sequence_number": 2,
                },
                {
                    "type": "response.refusal.delta",
                    "item_id": "msg_2",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": "I can't help with that.",
                    "sequence_number": 3,
                },
                {
                    "type": "response.refusal.done",
                    "item_id": "msg_2",
                    "output_index": 0,
                    "content_index": 0,
                    "refusal": "I can't help with that.",
                    "sequence_number": 4,
                },
                completed(seq=5),
            )
        ]
    )
    response = refused[-1].response
    assert response.finish_reason.reason == "content_filter" and response.text == "I can't help with that."
    failed = run(
        [
            sse(
                CREATED,
                {
                    "type": "response.failed",
                    "sequence_number": 1,
                    "response": {
                        "id": "resp_1",
                        "status": "failed",
                        "error": {"code": "server_error", "message": "boom"},
                    },
                },
            )
        ]
    )
    assert failed[-1].error.error_class == "server_error" and failed[-1].error.retryable


def test_a_gap_in_sequence_numbers_is_an_error_and_the_partial_is_kept():
    added = {
        "type": "response.output_item.added",
        "output_index": 0,
        "sequence_number": 1,
        "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
    }
    delta = {
        "type": "response.output_text.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": "Hello",
        "sequence_number": 2,
    }
    lost = dict(delta, delta=" world", sequence_number=5)
    events = run([sse(CREATED, added, delta, lost)])
    check_invariants(events)
    assert type(events[-1]) is ErrorEvent and "sequence_number 2 was followed by 5" in events[-1].error.message
    assert events[-1].partial.text == "Hello"


def test_a_stream_that_stops_before_completed_is_a_network_error():
    events = run([sse(CREATED)])
    assert type(events[-1]) is ErrorEvent and events[-1].error.error_class == "network"


def test_unknown_events_are_skipped_or_passed_through():
    odd = {"type": "response.brand_new_thing", "sequence_number": 1, "x": 1}
    quiet = run([sse(CREATED, odd, completed(seq=2))])
    assert not any(type(e) is ProviderEvent for e in quiet) and type(quiet[-1]) is Finish
    loud = run([sse(CREATED, odd, completed(seq=2))], passthrough=True)
    passed = [e for e in loud if type(e) is ProviderEvent]
    assert [e.event_type for e in passed] == ["response.brand_new_thing"] and passed[0].data["x"] == 1


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=10_000), max_size=30))
def test_any_chunking_gives_the_same_events(cuts):
    body = recorded("test_openai_responses_phase_streamed_on_part_start.0")
    points = sorted({c % len(body) for c in cuts} - {0})
    chunks = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    assert run(chunks) == run([body])


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=400))
def test_any_bytes_end_in_one_terminal_event(data):
    events = run([CREATED_BYTES, data])
    check_invariants(events)


CREATED_BYTES = sse(CREATED)


def test_raw_reasoning_text_streams_as_reasoning():
    item = {
        "type": "reasoning",
        "id": "rs_9",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Let me think."}],
    }
    body = sse(
        CREATED,
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "sequence_number": 1,
            "item": {**item, "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": "rs_9",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "reasoning_text", "text": ""},
            "sequence_number": 2,
        },
        *[
            {
                "type": "response.reasoning_text.delta",
                "item_id": "rs_9",
                "output_index": 0,
                "content_index": 0,
                "delta": d,
                "sequence_number": 3 + k,
            }
            for k, d in enumerate(["Let me ", "think."])
        ],
        {
            "type": "response.reasoning_text.done",
            "item_id": "rs_9",
            "output_index": 0,
            "content_index": 0,
            "text": "Let me think.",
            "sequence_number": 5,
        },
        {"type": "response.output_item.done", "output_index": 0, "item": item, "sequence_number": 6},
        completed(output=[item], seq=7),
    )
    events = run(chunkings(body)[1])
    check_invariants(events)
    content = events[-1].response.message.content
    assert content[0] == ThinkingPart(text="Let me think.", provider="openai", model="gpt-5")
    assert content[1].kind == "reasoning" and content[1].data == item
    assert shape(content) == shape(wire_response.parse(completed(output=[item])["response"], MODEL).message.content)


def test_function_call_arguments_that_are_not_json_stay_a_call_with_the_raw_text():
    added = {
        "type": "response.output_item.added",
        "output_index": 0,
        "sequence_number": 1,
        "item": {"type": "function_call", "id": "fc_0", "call_id": "call_0", "name": "weather", "arguments": ""},
    }
    delta = {
        "type": "response.function_call_arguments.delta",
        "item_id": "fc_0",
        "output_index": 0,
        "delta": '{"city": Par',
        "sequence_number": 2,
    }
    done = {
        "type": "response.output_item.done",
        "output_index": 0,
        "sequence_number": 3,
        "item": {
            "type": "function_call",
            "id": "fc_0",
            "call_id": "call_0",
            "name": "weather",
            "arguments": '{"city": Par',
        },
    }
    for chunks in chunkings(sse(CREATED, added, delta, done, completed(seq=4))):
        events = run(chunks)
        check_invariants(events)
        response = events[-1].response
        (call,) = response.tool_calls
        assert call.arguments is None and call.raw_arguments == '{"city": Par' and call.provider_id == "call_0"
        assert response.finish_reason.reason == "tool_calls"
        assert [w.code for w in response.warnings] == ["tool_arguments_invalid"]


# -- the project's own cassettes (cassettes/openai): these run whether or not ../shared is there

CASSETTES = REPO / "cassettes" / "openai"


@pytest.mark.parametrize("chunking", range(4))
def test_cassette_reasoning_a_phased_message_and_a_call(chunking):
    events = run(chunkings((CASSETTES / "reasoning-message-call.sse").read_bytes())[chunking])
    check_invariants(events)
    response = events[-1].response
    thinking = [p for p in response.message.content if type(p) is ThinkingPart]
    assert [t.text for t in thinking] == ["Looking at the question.", "Two tools will do."]  # one per summary
    assert response.text == "Let me check the weather in Zürich — one moment."
    (call,) = response.tool_calls
    assert (call.name, call.arguments, call.provider_id) == (
        "get_weather",
        {"city": "Zürich", "unit": "°C"},
        "call_cas1",
    )
    assert response.finish_reason.reason == "tool_calls" and response.id == "resp_cas1"
    u = response.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.reasoning_tokens) == (120, 80, 64, 48)
    # The encrypted reasoning and the message's phase are kept to go back to OpenAI.
    kept = json.dumps(msgspec.to_builtins(response.message.content))
    assert "gAAAAB-cassette-enc==" in kept and "commentary" in kept


@pytest.mark.parametrize("chunking", range(4))
def test_cassette_a_web_search_call_is_kept_whole(chunking):
    events = run(chunkings((CASSETTES / "web-search.sse").read_bytes())[chunking])
    check_invariants(events)
    response = events[-1].response
    (search,) = [p for p in response.message.content if type(p) is ProviderPart]
    assert search.api == "openai" and search.kind == "web_search_call" and search.data["id"] == "ws_cas1"
    assert response.text == "It shipped on Tuesday." and response.finish_reason.reason == "stop"


@pytest.mark.parametrize("chunking", range(4))
def test_cassette_a_failed_response_ends_in_an_error_with_what_arrived(chunking):
    events = run(chunkings((CASSETTES / "failed-midway.sse").read_bytes())[chunking])
    check_invariants(events)
    last = events[-1]
    assert type(last) is ErrorEvent and last.error.error_class == "server_error"
    assert "The model had a problem." in last.error.message and last.partial.text == "Partial ans"
