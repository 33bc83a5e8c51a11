"""Gemini stream bodies -> canonical events: every recorded Gemini body, and hand-written wire cases,
under hostile chunking, through the real emitter."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

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
    ProviderPart,
    ProviderPartEvent,
    ReasoningDelta,
    Request,
    TextDelta,
    TextPart,
    ThinkingPart,
    ToolCallDelta,
    ToolCallEnd,
)
from trunkline.workers._contract import SseOrJsonDecoder
from trunkline.workers._emit import Emitter
from trunkline.workers._sse import JsonArrayDecoder
from trunkline.workers.gemini.stream import GeminiStream

RECORDINGS = REPO.parent / "shared" / "recordings" / "gemini"
MODEL = ModelInfo(id="gemini:gemini-3.8-flash", provider="gemini", wire_name="gemini-3.8-flash")


def generate_content_recordings() -> list[Path]:
    """Every recorded generateContent / streamGenerateContent reply (the cache API's are not ours)."""
    out = []
    for folder in sorted(RECORDINGS.glob("*/*")):
        url = json.loads((folder / "request.json").read_text()).get("url") or ""
        if url and "generateContent" not in url and "GenerateContent" not in url:
            continue
        out.append(folder)
    return out


RECORDED = generate_content_recordings()


def recording(fragment: str) -> Path:
    if not RECORDINGS.exists():
        pytest.skip("../shared/recordings is not present; cassettes/ covers the same forms")
    [folder] = [f for f in RECORDED if fragment in f.name]
    return folder


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


def run(chunks: list[bytes], model: ModelInfo = MODEL) -> list[Any]:
    """Bytes through the body decoder, the translator and the real emitter, as the worker runs them."""
    frames: list[bytes] = []
    job = Job(
        request_id="r",
        client_id="c",
        operation_id="o",
        model=model,
        request=Request(model=model.id, messages=[Message.user("x")]),
    )
    counter = iter(range(1000))
    emitter = Emitter(job, "gemini", lambda rid, f, seq, t: frames.extend(f), lambda pid: f"tu_{next(counter)}")
    through_pipeline(chunks, GeminiStream(model.wire_name), "sse_or_json", emitter, "gemini")
    return [decode_event(split_frame(f)[1]) for f in frames]


def sse_payloads(body: bytes) -> list[Any]:
    decoder = SseOrJsonDecoder()
    return [json.loads(d) for _, d in decoder.feed(body) + decoder.flush()]


def as_json_array(payloads: list[Any]) -> bytes:
    """The same chunks in the non-SSE stream form: one pretty-printed array, `\\n,\\r\\n` between elements."""
    return ("[" + "\n,\r\n".join(json.dumps(p, indent=2, ensure_ascii=False) for p in payloads) + "]").encode()


def sse(*payloads: Any) -> bytes:
    return b"".join(b"data: " + json.dumps(p).encode() + b"\r\n\r\n" for p in payloads)


def final(events: list[Any]) -> Any:
    assert type(events[-1]) is Finish, events[-1]
    return events[-1].response


# ---------------------------------------------------------------------------
# every recording


@pytest.mark.parametrize("folder", RECORDED, ids=lambda f: f.name[-50:])
def test_every_recording_under_hostile_chunking_and_in_both_stream_forms(folder):
    body = (folder / "response.body").read_bytes()
    meta = json.loads((folder / "meta.json").read_text())
    if meta["status"] >= 400:
        events = run([body])
        assert len(events) == 1 and type(events[0]) is ErrorEvent
        return
    # A whole JSON reply is one element of the array form.
    forms = [body, as_json_array(sse_payloads(body))] if meta.get("stream") else [body]
    baseline = None
    for form in forms:
        for chunks in chunkings(form):
            events = run(chunks)
            check_invariants(events)
            assert not [e for e in events if type(e) in (TextDelta, ReasoningDelta) and not e.text], "empty delta"
            for end in (e for e in events if type(e) is ToolCallEnd):
                assert isinstance(end.arguments, dict)
                assert json.loads(end.raw_arguments or "{}") == end.arguments  # the deltas are its JSON
            result = msgspec.to_builtins(final(events), order="deterministic")
            result.pop("latency_ms")
            if baseline is None:
                baseline = result
            assert result == baseline


def test_reasoning_text_keeps_its_signature_from_a_trailing_empty_part():
    folder = recording("google-reasoning")
    events = run([(folder / "response.body").read_bytes()])
    resp = final(events)
    text, signature = resp.message.content
    assert isinstance(text, TextPart) and text.text.startswith('There are **3** "r"s in strawberry.')
    assert isinstance(signature, ProviderPart) and signature.kind == "thoughtSignature"
    assert signature.data.startswith("Eo0HCooHAb4") and signature.model == "gemini-3.8-flash"
    assert signature.api == "gemini" and signature.provider == "gemini"
    assert resp.finish_reason.reason == "stop"
    assert (resp.usage.input_tokens, resp.usage.output_tokens, resp.usage.reasoning_tokens) == (9, 285, 256)


def test_piecewise_arguments_are_assembled_and_streamed_as_json_text():
    folder = recording("google-stream-tool-call-arguments.chunks")
    events = run([(folder / "response.body").read_bytes()])
    resp = final(events)
    calls = resp.tool_calls
    assert [(c.name, c.arguments) for c in calls] == [
        ("getWeather", {"location": "Boston"}),
        ("getWeather", {"location": "San Francisco"}),
    ]
    first_deltas = "".join(e.partial_json for e in events if type(e) is ToolCallDelta and e.index == 0)
    assert json.loads(first_deltas) == {"location": "Boston"}
    # only the first of the parallel calls is signed, and its signature follows it
    kinds = [type(p).__name__ for p in resp.message.content]
    assert kinds == ["ToolCallPart", "ProviderPart", "ToolCallPart"]
    assert resp.finish_reason.reason == "tool_calls" and resp.finish_reason.raw == "STOP"
    assert calls[0].id != calls[1].id and all(c.id.startswith("tu_") for c in calls)


def test_nested_piecewise_arguments():
    folder = recording("nested.1.chunks")
    resp = final(run([(folder / "response.body").read_bytes()]))
    [call] = resp.tool_calls
    recipe = call.arguments["recipe"]
    assert recipe["name"] == "Lasagna" and len(recipe["ingredients"]) == 10 and len(recipe["steps"]) == 10
    assert recipe["ingredients"][0] == {"amount": "16 oz", "name": "Lasagna noodles"}
    assert recipe["steps"][0] == "Preheat oven to 375°F (190°C)."
    assert recipe["steps"][1].endswith("drain and set aside.")


def test_id_less_calls_of_gemini_2_get_distinct_canonical_ids():
    resp = final(run([(recording("test_google_model_iter_stream.0") / "response.body").read_bytes()]))
    [call] = resp.tool_calls
    assert call.provider_id is None and call.id.startswith("tu_") and call.arguments == {"country": "France"}


def test_gemini_3_call_ids_are_kept():
    resp = final(run([(recording("function_tools_stream.0") / "response.body").read_bytes()]))
    [call] = resp.tool_calls
    assert call.provider_id == "96c1su3s" and call.arguments == {}


def test_safety_block_with_no_parts():
    resp = final(run([(recording("safety_settings") / "response.body").read_bytes()]))
    assert resp.finish_reason.reason == "content_filter" and resp.finish_reason.raw == "SAFETY"
    assert resp.message.content == []
    [w] = resp.warnings
    assert w.code == "content_filter" and "HARM_CATEGORY_HATE_SPEECH" in w.message
    assert "HARM_CATEGORY_HARASSMENT" not in w.message  # not blocked, only rated


def test_max_tokens_spent_thinking_leaves_no_parts():
    resp = final(run([(recording("empty_response") / "response.body").read_bytes()]))
    assert resp.finish_reason.reason == "length" and resp.message.content == []
    assert (resp.usage.output_tokens, resp.usage.reasoning_tokens) == (2, 2)


def test_cached_tokens_are_part_of_the_prompt():
    resp = final(run([(recording("cached_content.1") / "response.body").read_bytes()]))
    u = resp.usage
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens) == (3520, 3512, 44, 42)


def test_usage_is_the_last_running_total_and_counts_tool_use_prompt():
    resp = final(run([(recording("web_search_tool_stream.0") / "response.body").read_bytes()]))
    assert resp.usage.input_tokens == 17 + 102  # promptTokenCount + toolUsePromptTokenCount


def test_thinking_then_a_signed_text_then_more_text():
    resp = final(run([(recording("thinking_part_iter") / "response.body").read_bytes()]))
    kinds = [type(p).__name__ for p in resp.message.content]
    assert kinds[0] == "ThinkingPart" and "ProviderPart" in kinds
    assert (resp.usage.input_tokens, resp.usage.output_tokens, resp.usage.reasoning_tokens) == (34, 469 + 787, 787)


# ---------------------------------------------------------------------------
# hand-written wire cases


def test_integer_enums_are_read():
    body = sse(
        {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}]},
                    "finishReason": 1,
                }
            ],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2},
        }
    )
    resp = final(run([body]))
    assert resp.finish_reason.reason == "tool_calls" and resp.finish_reason.raw == "STOP"
    body = sse(
        {"candidates": [{"content": {}, "finishReason": 3, "safetyRatings": [{"category": 8, "blocked": True}]}]}
    )
    resp = final(run([body]))
    assert resp.finish_reason.reason == "content_filter" and resp.finish_reason.raw == "SAFETY"


def test_prompt_blocked_before_any_candidate():
    body = sse(
        {
            "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
            "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
        }
    )
    events = run([body])
    check_invariants(events)
    resp = final(events)
    assert resp.finish_reason.reason == "content_filter" and resp.finish_reason.raw == "PROHIBITED_CONTENT"
    assert any("PROHIBITED_CONTENT" in w.message for w in resp.warnings)
    assert resp.usage.input_tokens == 7


def test_malformed_function_call_is_a_degraded_finish_that_keeps_the_text():
    body = sse(
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me call"}]}}]},
        {
            "candidates": [
                {
                    "content": {"role": "model"},
                    "finishReason": "MALFORMED_FUNCTION_CALL",
                    "finishMessage": "Malformed function call: foo((",
                }
            ]
        },
    )
    resp = final(run([body]))
    assert resp.text == "Let me call" and resp.finish_reason.reason == "error"
    assert any(w.code == "degraded_finish" and "foo((" in w.message for w in resp.warnings)


def test_an_error_object_mid_stream_ends_with_the_partial_response():
    body = sse(
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hal"}]}}]},
        {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
    )
    events = run([body])
    check_invariants(events)
    err = events[-1]
    assert type(err) is ErrorEvent and err.error.error_class == "server_error"
    assert err.partial.text == "Hal"


def test_a_stream_cut_before_its_finish_is_a_network_error():
    body = sse({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hal"}]}}]})
    events = run([body])
    assert type(events[-1]) is ErrorEvent and events[-1].error.error_class == "network"


def test_server_side_tool_parts_are_kept_verbatim_in_order():
    code = {"executableCode": {"language": "PYTHON", "code": "print(1+1)"}}
    result = {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "2\n"}, "thoughtSignature": "c2ln"}
    body = sse(
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Computing."}, code]}}]},
        {
            "candidates": [
                {"content": {"role": "model", "parts": [result, {"text": "It is 2."}]}, "finishReason": "STOP"}
            ]
        },
    )
    events = run([body])
    check_invariants(events)
    parts = [e for e in events if type(e) is ProviderPartEvent]
    assert [(p.kind, p.data, p.model) for p in parts] == [
        ("executableCode", code, None),
        ("codeExecutionResult", result, "gemini-3.8-flash"),
    ]
    resp = final(events)
    assert [type(p).__name__ for p in resp.message.content] == ["TextPart", "ProviderPart", "ProviderPart", "TextPart"]
    assert resp.finish_reason.reason == "stop"


def test_a_signed_thought_part_with_no_text():
    body = sse(
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [{"thought": True, "thoughtSignature": "dGg="}, {"text": "Answer."}],
                    },
                    "finishReason": "STOP",
                }
            ]
        }
    )
    resp = final(run([body]))
    first, second = resp.message.content
    assert isinstance(first, ProviderPart) and first.kind == "thought"
    assert first.data == {"thought": True, "thoughtSignature": "dGg="} and first.model == "gemini-3.8-flash"
    assert isinstance(second, TextPart)


def test_thoughts_become_reasoning_and_the_text_after_them_a_new_part():
    body = sse(
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hmm", "thought": True}]}}]},
        {"candidates": [{"content": {"role": "model", "parts": [{"text": " ok", "thought": True}]}}]},
        {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": "Yes.", "thoughtSignature": "cw=="}]},
                    "finishReason": "STOP",
                }
            ]
        },
    )
    resp = final(run([body]))
    thinking, text, sig = resp.message.content
    assert isinstance(thinking, ThinkingPart) and thinking.text == "Hmm ok" and thinking.provider == "gemini"
    assert text.text == "Yes." and sig.data == "cw=="


def test_the_json_array_form_with_objects_over_many_lines():
    body = (
        b'[{\r\n  "candidates": [\r\n    {\r\n      "content": {\r\n        "parts": [\r\n'
        b'          {\r\n            "text": "Caf\xc3\xa9 \\"}]\\" ok"\r\n          }\r\n        ],\r\n'
        b'        "role": "model"\r\n      }\r\n    }\r\n  ]\r\n}\n,\r\n'
        b'{\r\n  "candidates": [{"content": {"parts": [{"text": "!"}], "role": "model"},'
        b' "finishReason": "STOP"}],\r\n  "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 3}\r\n}\r\n]'
    )
    for chunks in chunkings(body):
        resp = final(run(chunks))
        assert resp.text == 'Café "}]" ok!' and resp.usage.input_tokens == 4


# ---------------------------------------------------------------------------
# properties


TRICKY = st.text(st.sampled_from('a"\\{}[]é, \n'), max_size=8) | st.text(max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            TRICKY,
            st.recursive(
                st.none() | st.booleans() | st.integers() | TRICKY,
                lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                max_leaves=8,
            ),
            max_size=4,
        ),
        max_size=5,
    ),
    st.data(),
)
def test_json_array_decoder_gives_the_same_objects_under_any_chunking(objects, data):
    body = ("[" + "\n,\r\n".join(json.dumps(o, indent=1, ensure_ascii=False) for o in objects) + "]").encode()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=12)))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    decoder = JsonArrayDecoder()
    out = [json.loads(x) for c in chunks for x in decoder.feed(c)] + decoder.flush()
    assert out == objects


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=8))
def test_any_bytes_end_in_a_terminal_event_never_a_crash(body, cuts):
    cuts = sorted(c for c in cuts if c <= len(body))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    events = run(chunks)  # only ProviderError may escape the translator; run() turns it into an error event
    check_invariants(events)


def test_search_grounding_comes_last_for_the_caller_and_is_never_sent_back():
    from trunkline.workers.gemini.request import build

    resp = final(run([(recording("web_search_tool_stream.0") / "response.body").read_bytes()]))
    grounding = resp.message.content[-1]
    assert isinstance(grounding, ProviderPart) and grounding.kind == "groundingMetadata"
    assert "searchEntryPoint" in grounding.data and grounding.model is None
    history = [Message.user("weather?"), resp.message, Message.user("and tomorrow?")]
    built = build(Request(model=MODEL.id, messages=history), MODEL)
    assert built.body["contents"][1]["parts"] == [{"text": resp.text}] and not built.warnings


# -- the project's own cassettes (cassettes/gemini): these run whether or not ../shared is there


CASSETTES = REPO / "cassettes" / "gemini"


@pytest.mark.parametrize("chunking", range(4))
def test_cassette_thinking_then_text_keeps_the_signature_on_its_part(chunking):
    events = run(chunkings((CASSETTES / "thinking-then-text.sse").read_bytes())[chunking])
    check_invariants(events)
    resp = final(events)
    thinking = [p for p in resp.message.content if type(p) is ThinkingPart]
    assert [t.text for t in thinking] == ["**Weighing it.** The user asks for a haiku."]
    assert resp.text == "Autumn wind — quiet streams."
    assert "c2lnbmF0dXJlLWNhc3NldHRl" in json.dumps(msgspec.to_builtins(resp.message.content))
    assert (resp.usage.input_tokens, resp.usage.output_tokens, resp.usage.reasoning_tokens) == (21, 42, 30)


@pytest.mark.parametrize("chunking", range(4))
def test_cassette_function_calls_in_the_json_array_form(chunking):
    events = run(chunkings((CASSETTES / "function-calls.json").read_bytes())[chunking])
    check_invariants(events)
    resp = final(events)
    assert [(c.name, c.arguments) for c in resp.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        (
            "plan_trip",
            {"stops": [{"city": "Lyon", "nights": 2}, {"city": "Nice", "nights": 3}], "budget": {"eur": 900}},
        ),
    ]
    assert resp.finish_reason.reason == "tool_calls" and resp.usage.input_tokens == 40


def test_cassette_a_blocked_prompt_is_a_content_filter_ending():
    events = run([(CASSETTES / "prompt-blocked.json").read_bytes()])
    last = events[-1]
    ending = last.response if type(last) is Finish else last.partial
    reason = ending.finish_reason.reason if ending is not None else last.error.error_class
    assert reason == "content_filter", last
