"""The sans-IO stream decoders: WHATWG SSE parsing and NDJSON line splitting, under any chunking."""

from __future__ import annotations

import itertools
import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.workers._sse import NdjsonDecoder, SseDecoder, SseEvent

E = SseEvent


# ---------------------------------------------------------------------------
# helpers


def sse(chunks: list[bytes]) -> list[SseEvent]:
    dec = SseDecoder()
    out: list[SseEvent] = []
    for chunk in chunks:
        out += dec.feed(chunk)
    return out + dec.flush()


def ndjson(chunks: list[bytes]) -> list[bytes]:
    dec = NdjsonDecoder()
    out: list[bytes] = []
    for chunk in chunks:
        out += dec.feed(chunk)
    return out + dec.flush()


def split_at(data: bytes, points: list[int]) -> list[bytes]:
    cuts = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(cuts)]


def chunkings(data: bytes) -> list[list[bytes]]:
    """Whole, one byte at a time, and split in two at every point."""
    return [[data], [data[i : i + 1] for i in range(len(data))]] + [[data[:i], data[i:]] for i in range(len(data) + 1)]


def sse_all_ways(data: bytes) -> list[SseEvent]:
    """The events for `data`, after checking that every chunking of it gives the same ones."""
    expected = sse([data])
    for chunks in chunkings(data):
        assert sse(chunks) == expected, chunks
    return expected


def ndjson_all_ways(data: bytes) -> list[bytes]:
    expected = ndjson([data])
    for chunks in chunkings(data):
        assert ndjson(chunks) == expected, chunks
    return expected


def reference_sse(body: bytes) -> list[SseEvent]:
    """A slow, direct reading of the WHATWG algorithm (decode the whole stream, then parse
    lines), with the decoder's per-event id/retry and lenient end of body."""
    text = body.decode("utf-8", "replace").removeprefix("\ufeff")
    events, data, event, id_, retry = [], None, "", None, None
    for line in re.split(r"\r\n|\r|\n", text):
        if line == "":
            if data is not None:
                events.append(SseEvent(event or "message", "\n".join(data), id_, retry))
            data, event, id_, retry = None, "", None, None
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data = (data or []) + [value]
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            id_ = value
        elif name == "retry" and value and all("0" <= c <= "9" for c in value):
            retry = int(value)
    if data is not None:
        events.append(SseEvent(event or "message", "\n".join(data), id_, retry))
    return events


# ---------------------------------------------------------------------------
# SSE: line endings and chunking


def test_lf_crlf_and_lone_cr_endings_give_the_same_events() -> None:
    expected = [E(data="a"), E(event="x", data="b\nc", id="7")]
    for eol in (b"\n", b"\r\n", b"\r"):
        body = eol.join([b"data: a", b"", b"event: x", b"id: 7", b"data: b", b"data: c", b"", b""])
        assert sse_all_ways(body) == expected, eol


def test_mixed_line_endings_in_one_stream() -> None:
    assert sse_all_ways(b"data: a\r\r\ndata: b\n\rdata: c\r\n\n") == [E(data="a"), E(data="b"), E(data="c")]


def test_crlf_split_across_chunks_is_one_line_ending() -> None:
    # Were the LF read as a second line ending, "a" would be dispatched alone.
    assert sse([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [E(data="a\nb")]
    # Empty chunks in between do not forget the pending CR.
    assert sse([b"data: a\r", b"", b"", b"\ndata: b\r\n\r\n"]) == [E(data="a\nb")]


def test_cr_at_chunk_end_followed_by_other_text_still_ends_the_line() -> None:
    dec = SseDecoder()
    assert dec.feed(b"data: a\r") == []
    assert dec.feed(b"\r") == [E(data="a")]  # a lone CR is a whole (blank) line


def test_events_come_out_as_soon_as_their_blank_line_arrives() -> None:
    dec = SseDecoder()
    assert dec.feed(b"data: one\n") == []
    assert dec.feed(b"\n") == [E(data="one")]
    assert dec.feed(b"data: two\n\ndata: thr") == [E(data="two")]
    assert dec.feed(b"ee\n\n") == [E(data="three")]
    assert dec.flush() == []


def test_lines_that_are_not_line_endings_in_sse_stay_in_the_data() -> None:
    # NEL, U+2028, VT and FF split str.splitlines() but are not SSE line endings.
    body = "data: a\x85b\u2028c\x0bd\x0ce\x1cf\n\n".encode()
    assert sse_all_ways(body) == [E(data="a\x85b\u2028c\x0bd\x0ce\x1cf")]


# ---------------------------------------------------------------------------
# SSE: fields


def test_comments_are_ignored() -> None:
    body = b": hello\n:\ndata: x\n: keep-alive\n\n:only a comment\n\n"
    assert sse_all_ways(body) == [E(data="x")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert sse_all_ways(b"data: first\ndata:\ndata: third\n\n") == [E(data="first\n\nthird")]


def test_event_id_and_retry_fields() -> None:
    body = b"event: update\nid: 42\nretry: 1500\ndata: x\n\n"
    assert sse_all_ways(body) == [E(event="update", data="x", id="42", retry=1500)]


def test_last_field_of_a_kind_wins_within_an_event() -> None:
    body = b"event: a\nevent: b\nid: 1\nid: 2\nretry: 5\nretry: 6\ndata: x\n\n"
    assert sse_all_ways(body) == [E(event="b", data="x", id="2", retry=6)]


def test_id_and_retry_belong_to_their_event_only() -> None:
    body = b"id: 1\nretry: 10\ndata: a\n\ndata: b\n\nid\ndata: c\n\n"
    assert sse_all_ways(body) == [E(data="a", id="1", retry=10), E(data="b"), E(data="c", id="")]


def test_empty_event_name_means_message() -> None:
    assert sse_all_ways(b"event:\ndata: x\n\nevent\ndata: y\n\n") == [E(data="x"), E(data="y")]


def test_fields_of_an_event_without_data_do_not_leak_into_the_next() -> None:
    body = b"event: ping\nid: 9\nretry: 3\n\ndata: x\n\n"
    assert sse_all_ways(body) == [E(data="x")]


def test_id_containing_nul_is_ignored() -> None:
    assert sse_all_ways(b"id: 1\nid: a\x00b\ndata: x\n\n") == [E(data="x", id="1")]


def test_retry_must_be_ascii_digits() -> None:
    for bad in (b"retry: 1.5", b"retry: -1", b"retry: 12a", b"retry:", b"retry:  5", "retry: \u0663".encode()):
        assert sse_all_ways(bad + b"\ndata: x\n\n") == [E(data="x")], bad


def test_bom_is_stripped_from_the_first_line_only() -> None:
    assert sse_all_ways(b"\xef\xbb\xbfdata: x\n\n") == [E(data="x")]
    # A BOM anywhere else is part of the field name, so the line is an unknown field.
    assert sse_all_ways(b"data: x\n\n\xef\xbb\xbfdata: y\n\n") == [E(data="x")]
    assert sse_all_ways(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []


def test_bom_split_across_chunks() -> None:
    assert sse([b"\xef", b"\xbb", b"\xbfdata: x\n\n"]) == [E(data="x")]


def test_a_line_without_colon_is_a_field_with_empty_value() -> None:
    assert sse_all_ways(b"data\ndata\n\n") == [E(data="\n")]
    assert sse_all_ways(b"data\n\n") == [E(data="")]


def test_only_one_leading_space_is_removed() -> None:
    body = b"data:no-space\ndata: one\ndata:  two\ndata:\tthree\n\n"
    assert sse_all_ways(body) == [E(data="no-space\none\n two\n\tthree")]


def test_a_colon_in_the_value_is_kept() -> None:
    assert sse_all_ways(b'data: {"a": "b:c"}\n\n') == [E(data='{"a": "b:c"}')]


def test_empty_data_line_is_data() -> None:
    assert sse_all_ways(b"data:\n\n") == [E(data="")]
    assert sse_all_ways(b"data: \n\n") == [E(data="")]


def test_event_without_data_is_not_dispatched() -> None:
    assert sse_all_ways(b"event: ping\n\nid: 3\n\n: c\n\n\n\n") == []


def test_unknown_fields_are_ignored() -> None:
    body = b"foo: bar\nDATA: up\ndata : spaced\nevent: e\ndata: x\n\n"
    assert sse_all_ways(body) == [E(event="e", data="x")]


def test_flush_dispatches_an_unterminated_event() -> None:
    assert sse_all_ways(b"data: a\n\ndata: b\n") == [E(data="a"), E(data="b")]
    assert sse_all_ways(b"event: e\ndata: last") == [E(event="e", data="last")]
    assert sse_all_ways(b"data: a\r") == [E(data="a")]


def test_flush_without_pending_data_gives_nothing() -> None:
    assert sse_all_ways(b"") == []
    assert sse_all_ways(b"event: e\nid: 1") == []
    assert sse_all_ways(b": comment") == []


def test_flush_resets_the_decoder() -> None:
    dec = SseDecoder()
    assert dec.feed(b"event: e\ndata: a\nda") == []
    assert dec.flush() == [E(event="e", data="a")]
    assert dec.flush() == []
    # A fresh body: no state left over, and a BOM is a BOM again.
    assert dec.feed(b"\xef\xbb\xbfdata: b\n\n") == [E(data="b")]


# ---------------------------------------------------------------------------
# SSE: text decoding


def test_multibyte_utf8_split_inside_a_character() -> None:
    text = "It is 72°F ’ok’ 🌡️ 日本"
    body = b"event: t\xc3\xa9\ndata: " + text.encode() + b"\n\n"
    assert sse_all_ways(body) == [E(event="té", data=text)]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    body = b"data: a\xffb\xe2\x80\nid: \xc3\nevent: \x80\n\n"
    assert sse_all_ways(body) == [E(event="\ufffd", data="a\ufffdb\ufffd", id="\ufffd")]


# ---------------------------------------------------------------------------
# SSE: provider-shaped streams


ANTHROPIC = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"msg_1","role":"assistant","content":[]}}\n\n'
    b"event: content_block_start\n"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b"event: ping\n"
    b'data: {"type": "ping"}\n\n'
    b"event: content_block_delta\n"
    b'data: {"type": "content_block_delta",   "index": 0, "delta": {"type": "text_delta", "text": "It\xe2\x80\x99s 72\xc2\xb0F"}}   \n\n'
    b"event: content_block_stop\n"
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b"event: message_stop\n"
    b'data: {"type":"message_stop"}\n\n'
)


def test_anthropic_style_stream() -> None:
    events = sse_all_ways(ANTHROPIC)
    assert [e.event for e in events] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "message_stop",
    ]
    assert all(json.loads(e.data)["type"] == e.event for e in events)
    assert events[2] == E(event="ping", data='{"type": "ping"}')
    delta = events[3]
    assert delta.data.endswith("}   ")  # trailing padding is the caller's to ignore
    assert json.loads(delta.data)["delta"]["text"] == "It’s 72°F"


OPENAI = (
    b": OPENROUTER PROCESSING\n\n"
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"lo \xf0\x9f\x91\x8b"}}]}\n\n'
    b'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def test_openai_style_stream_ending_in_done() -> None:
    events = sse_all_ways(OPENAI)
    assert all(e.event == "message" and e.id is None for e in events)
    assert events[-1] == E(data="[DONE]")
    text = "".join(json.loads(e.data)["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text == "Hello 👋"


def test_openai_style_stream_without_final_blank_line() -> None:
    assert sse_all_ways(OPENAI.removesuffix(b"\n\n"))[-1] == E(data="[DONE]")


GEMINI = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "Sun"}],"role": "model"}}]}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"text": "ny, 25\xc2\xb0C"}],"role": "model"},'
    b'"finishReason": "STOP"}],"usageMetadata": {"promptTokenCount": 4}}\r\n\r\n'
)


def test_gemini_style_stream_with_crlf() -> None:
    events = sse_all_ways(GEMINI)
    assert len(events) == 2
    parts = [json.loads(e.data)["candidates"][0]["content"]["parts"][0]["text"] for e in events]
    assert "".join(parts) == "Sunny, 25°C"
    assert not any("\r" in e.data for e in events)


def test_many_tiny_chunks_of_one_long_line_stay_linear() -> None:
    # 200k one-byte feeds: quadratic rescanning of the buffer would take minutes.
    payload = b"x" * 200_000
    dec = SseDecoder()
    out = [ev for i in range(len(payload)) for ev in dec.feed(payload[i : i + 1])]
    out += dec.feed(b"\r") + dec.feed(b"\n\r\n")
    assert out == []  # "xxx..." was an unknown field, so the blank line had no data to dispatch
    assert dec.feed(b"data: " + payload + b"\n\n") == [E(data="x" * 200_000)]


# ---------------------------------------------------------------------------
# NDJSON


def test_ndjson_lines_with_lf_and_crlf() -> None:
    body = b'{"a": 1}\n{"b": 2}\r\n{"c": "\xc2\xb0"}\n'
    assert ndjson_all_ways(body) == [b'{"a": 1}', b'{"b": 2}', b'{"c": "\xc2\xb0"}']


def test_ndjson_skips_blank_and_whitespace_only_lines() -> None:
    body = b'\n\r\n   \n\t\r\n{"a": 1}\n\n \r\n{"b": 2}\n  \t '
    assert ndjson_all_ways(body) == [b'{"a": 1}', b'{"b": 2}']


def test_ndjson_keeps_inner_whitespace_and_lone_cr() -> None:
    assert ndjson_all_ways(b' {"a": "x\ry"} \n') == [b' {"a": "x\ry"} ']


def test_ndjson_final_line_without_newline_comes_from_flush_only() -> None:
    dec = NdjsonDecoder()
    assert dec.feed(b'{"a": 1}\n{"done"') == [b'{"a": 1}']
    assert dec.feed(b": true}") == []
    assert dec.flush() == [b'{"done": true}']
    assert dec.flush() == []


def test_ndjson_one_big_object_without_newline() -> None:
    body = json.dumps({"message": {"content": "é" * 50_000}, "done": True}, ensure_ascii=False).encode()
    dec = NdjsonDecoder()
    assert [line for i in range(0, len(body), 7) for line in dec.feed(body[i : i + 7])] == []
    (line,) = dec.flush()
    assert line == body
    assert json.loads(line)["done"] is True


def test_ndjson_one_byte_at_a_time_stays_linear() -> None:
    payload = b'{"x": "' + b"y" * 200_000 + b'"}'
    dec = NdjsonDecoder()
    assert [line for i in range(len(payload)) for line in dec.feed(payload[i : i + 1])] == []
    assert dec.feed(b"\r\n") == [payload]


# ---------------------------------------------------------------------------
# properties


interesting_bytes = st.lists(
    st.sampled_from(
        [
            b"\r",
            b"\n",
            b"\r\n",
            b":",
            b" ",
            b"data",
            b"event",
            b"id",
            b"retry",
            b"7",
            b"x",
            b"\x00",
            b"\xef\xbb\xbf",
            "’".encode(),
            "😀".encode(),
            b"\xff",
            b"\xe2\x80",
        ]
    ),
    max_size=40,
).map(b"".join)
any_bytes = st.one_of(st.binary(max_size=200), interesting_bytes)


@settings(max_examples=200, deadline=None)
@given(body=any_bytes, data=st.data())
def test_sse_any_chunking_gives_the_same_events_as_one_chunk(body: bytes, data: st.DataObject) -> None:
    points = data.draw(st.lists(st.integers(0, len(body)), max_size=12))
    assert sse(split_at(body, points)) == sse([body])


@settings(max_examples=200, deadline=None)
@given(body=any_bytes)
def test_sse_matches_a_direct_reading_of_the_spec(body: bytes) -> None:
    assert sse([body]) == reference_sse(body)
    assert sse([body[i : i + 1] for i in range(len(body))]) == reference_sse(body)


line_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"))
events_strategy = st.lists(
    st.tuples(
        line_text,  # event name ("" means "message")
        st.lists(line_text, min_size=1, max_size=4),  # data lines
        st.none() | line_text.filter(lambda s: "\0" not in s),  # id
        st.none() | st.integers(0, 10**12),  # retry
        st.booleans(),  # a comment line in the middle
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(
    events=events_strategy,
    eol=st.sampled_from(["\n", "\r\n", "\r"]),
    bom=st.booleans(),
    terminated=st.booleans(),
    data=st.data(),
)
def test_sse_round_trips_serialized_events(
    events: list, eol: str, bom: bool, terminated: bool, data: st.DataObject
) -> None:
    lines: list[str] = []
    expected: list[SseEvent] = []
    for name, data_lines, id_, retry, comment in events:
        if name:
            lines.append(f"event: {name}")
        if comment:
            lines.append(": " + name)
        if id_ is not None:
            lines.append(f"id: {id_}")
        if retry is not None:
            lines.append(f"retry: {retry}")
        lines += [f"data: {d}" for d in data_lines]
        lines.append("")
        expected.append(SseEvent(name or "message", "\n".join(data_lines), id_, retry))
    if lines and not terminated:
        lines.pop()  # the last event's blank line never comes: flush() dispatches it
    body = ("\ufeff" if bom else "") + "".join(line + eol for line in lines)
    raw = body.encode()
    points = data.draw(st.lists(st.integers(0, len(raw)), max_size=20))
    assert sse(split_at(raw, points)) == expected


@settings(max_examples=200, deadline=None)
@given(
    body=st.one_of(
        st.binary(max_size=200),
        st.lists(st.sampled_from([b"\n", b"\r", b"\r\n", b" ", b"\t", b"{}", b'"a"', b"\xc3\xa9"]), max_size=40).map(
            b"".join
        ),
    ),
    data=st.data(),
)
def test_ndjson_any_chunking_gives_the_same_lines(body: bytes, data: st.DataObject) -> None:
    points = data.draw(st.lists(st.integers(0, len(body)), max_size=12))
    lines = ndjson(split_at(body, points))
    assert lines == ndjson([body])
    expected = [line.removesuffix(b"\r") for line in body.split(b"\n") if line.strip(b" \t\r\x0b\x0c")]
    assert lines == expected


def test_the_usual_events_and_the_unusual_ones_agree_with_the_reference_in_any_chunking() -> None:
    # The decoder takes the usual event (one `data:` line, perhaps after `event:`) apart
    # without a line parser: every other form must still come out as the reference says.
    body = (
        '\ufeffevent: content_block_delta\ndata: {"a": 1}\n\n'
        "data:no space\n\n"
        ": a comment\ndata: after a comment\n\n"
        "id: 3\ndata: with an id\n\n"
        "data: two\ndata: lines\n\n\n\n"
        "event: x\nretry: 5\ndata: retry\n\n"
        "event: \ndata: empty type\n\n"
        "event: only a type\n\n"
        "data: é\n\n"
        "data: unterminated"
    ).encode()
    assert sse_all_ways(body) == reference_sse(body)


def test_raw_events_keep_the_data_as_bytes_and_match_the_decoded_ones() -> None:
    body = b'event: e\ndata: {"x": "\xc3\xa9"}\n\ndata: [DONE]\n\n'
    raw = SseDecoder().feed_raw(body)
    assert raw == [("e", b'{"x": "\xc3\xa9"}', None, None), ("message", b"[DONE]", None, None)]
    assert [E(event=e, data=d.decode()) for e, d, _, _ in raw] == SseDecoder().feed(body)
