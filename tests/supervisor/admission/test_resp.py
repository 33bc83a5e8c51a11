"""The RESP2 codec: replies decode the same however the bytes arrive, and no input
raises anything but the codec's own error."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.supervisor.admission.resp import (
    NEED_MORE,
    Decoder,
    ErrorReply,
    Reply,
    RespError,
    encode_command,
)


def encode_reply(reply: Reply) -> bytes:
    """What a Redis server would send for `reply` (the test's own encoder, written from the spec)."""
    if reply is None:
        return b"$-1\r\n"
    if isinstance(reply, ErrorReply):
        return b"-" + reply.message.encode() + b"\r\n"
    if isinstance(reply, str):
        return b"+" + reply.encode() + b"\r\n"
    if isinstance(reply, int):
        return b":%d\r\n" % reply
    if isinstance(reply, bytes):
        return b"$%d\r\n%s\r\n" % (len(reply), reply)
    return b"*%d\r\n" % len(reply) + b"".join(encode_reply(item) for item in reply)


line_text = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30)
replies: st.SearchStrategy[Reply] = st.recursive(
    st.none()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.binary(max_size=64)
    | line_text
    | line_text.map(lambda m: ErrorReply("ERR " + m)),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=30,
)


def decode_all(chunks: list[bytes]) -> list[Reply]:
    decoder = Decoder()
    out: list[Reply] = []
    for chunk in chunks:
        decoder.feed(chunk)
        while (reply := decoder.next()) is not NEED_MORE:
            out.append(reply)  # type: ignore[arg-type]  # NEED_MORE is excluded by the loop's test
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(replies, min_size=1, max_size=5), st.data())
def test_any_chunking_of_valid_replies_decodes_the_same(values: list[Reply], data: st.DataObject) -> None:
    wire = b"".join(encode_reply(v) for v in values)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=12)))
    chunks = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    assert decode_all(chunks) == values
    assert decode_all([bytes([b]) for b in wire]) == values  # one byte at a time


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=5))
def test_any_bytes_raise_nothing_but_the_codecs_own_error(junk: bytes, cuts: list[int]) -> None:
    points = sorted(c for c in cuts if c <= len(junk))
    chunks = [junk[a:b] for a, b in zip([0, *points], [*points, len(junk)], strict=True)]
    with contextlib.suppress(RespError):
        decode_all(chunks)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([b"+", b"-", b":", b"$", b"*"]), st.binary(max_size=40))
def test_typed_prefixes_with_garbage_raise_only_the_codecs_error(kind: bytes, junk: bytes) -> None:
    with contextlib.suppress(RespError):
        decode_all([kind + junk + b"\r\n"])


@pytest.mark.parametrize(
    "wire",
    [b"!x\r\n", b":12a\r\n", b"$5\r\nabcdefg\r\n", b"$-7\r\n", b"*-3\r\n", b":\r\n", b"$99999999999\r\n"],
)
def test_malformed_replies_are_the_codecs_error(wire: bytes) -> None:
    with pytest.raises(RespError):
        decode_all([wire])


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(RespError, match="nested"):
        decode_all([b"*1\r\n" * 10_000])


def test_a_line_without_its_end_is_refused_past_the_bound() -> None:
    with pytest.raises(RespError, match="longer"):
        decode_all([b"+" + b"a" * 70_000])
    assert decode_all([b"+" + b"a" * 1000]) == []  # short: it may still come


def test_commands_are_arrays_of_bulk_strings() -> None:
    assert encode_command("SET", b"k", 12, 0.5) == b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n12\r\n$3\r\n0.5\r\n"
    with pytest.raises(TypeError):
        encode_command("SET", True)
