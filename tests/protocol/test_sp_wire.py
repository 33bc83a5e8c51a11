"""nng's wire format, as the daemon reads and writes it: whatever the chunking, the
reader gives back exactly the messages sent; it refuses what is not SP; a message
over the limit is skipped, not buffered, and can still be answered."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.protocol import sp_wire
from trunkline.protocol.sp_wire import FrameReader, Oversize, WireError

payloads = st.lists(st.binary(max_size=300), max_size=20)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, last = [], 0
    for p in points:
        out.append(data[last:p])
        last = p
    out.append(data[last:])
    return out


@settings(max_examples=300, deadline=None)
@given(payloads, st.lists(st.integers(min_value=0, max_value=10_000), max_size=40), st.booleans())
def test_any_chunking_gives_back_exactly_the_messages_sent(messages, cuts, ipc):
    frame = sp_wire.frame_ipc if ipc else sp_wire.frame_tcp
    wire = sp_wire.handshake(sp_wire.REQ0) + b"".join(frame(m) for m in messages)
    reader = FrameReader(ipc=ipc, expect=sp_wire.REQ0)
    got = []
    for chunk in chunked(wire, cuts):
        got += reader.feed(chunk)
    assert got == messages
    assert reader.buffered == 0


@settings(max_examples=200, deadline=None)
@given(payloads, st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_a_reused_receive_buffer_can_be_overwritten_after_each_feed(messages, cuts):
    """The daemon receives into one buffer and feeds a view of it: nothing the reader
    returns or keeps may still point into that buffer."""
    wire = b"".join(sp_wire.frame_ipc(m) for m in messages)
    reader = FrameReader(ipc=True)
    buffer = bytearray(10_000)
    got = []
    for chunk in chunked(wire, cuts):
        buffer[: len(chunk)] = chunk
        got += reader.feed(memoryview(buffer)[: len(chunk)])
        buffer[:] = b"\xee" * len(buffer)  # the next receive overwrites it
    assert got == messages


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000), st.lists(st.integers(min_value=0, max_value=3000), max_size=30), st.booleans())
def test_any_bytes_either_parse_or_raise_wire_error_never_anything_else(data, cuts, ipc):
    reader = FrameReader(ipc=ipc, max_size=1000, expect=sp_wire.PUB0)
    try:
        for chunk in chunked(data, cuts):
            for m in reader.feed(chunk):
                assert isinstance(m, (bytes, Oversize))
    except WireError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=65, max_value=5000), st.lists(st.integers(min_value=0, max_value=6000), max_size=20))
def test_an_oversized_message_is_skipped_and_the_next_one_still_arrives(size, cuts):
    big = (0x80000007).to_bytes(4, "big") + b"x" * (size - 4)
    wire = sp_wire.frame_ipc(big) + sp_wire.frame_ipc(b"next")
    reader = FrameReader(ipc=True, max_size=64)
    got = []
    for chunk in chunked(wire, cuts):
        got += reader.feed(chunk)
        assert reader.buffered <= 9 + sp_wire.OVERSIZE_PREFIX  # never holds the big one
    assert got == [Oversize(big[: sp_wire.OVERSIZE_PREFIX], size), b"next"]
    backtrace, _ = sp_wire.split_backtrace(got[0].prefix)
    assert backtrace == (0x80000007).to_bytes(4, "big")


def test_handshake_of_the_wrong_protocol_or_not_sp_is_refused():
    with pytest.raises(WireError, match="speaks req0, expected sub0"):
        FrameReader(ipc=True, expect=sp_wire.SUB0).feed(sp_wire.handshake(sp_wire.REQ0))
    with pytest.raises(WireError, match="not an SP handshake"):
        FrameReader(ipc=True, expect=sp_wire.SUB0).feed(b"GET / HTTP/1.1\r\n")
    assert sp_wire.handshake(sp_wire.PUB0) == b"\x00SP\x00\x00\x20\x00\x00"  # what nng sends


def test_ipc_frames_carry_a_type_byte_and_unknown_types_are_refused():
    assert sp_wire.frame_ipc(b"hi") == b"\x01" + (2).to_bytes(8, "big") + b"hi"
    assert sp_wire.frame_tcp(b"hi") == (2).to_bytes(8, "big") + b"hi"
    with pytest.raises(WireError, match="unknown message type 2"):
        FrameReader(ipc=True).feed(b"\x02" + (2).to_bytes(8, "big") + b"hi")


def test_backtraces_end_at_the_word_with_the_top_bit_and_are_bounded():
    rid = (0x80000001).to_bytes(4, "big")
    hop = (0x00000005).to_bytes(4, "big")
    assert sp_wire.split_backtrace(rid + b"body") == (rid, b"body")
    assert sp_wire.split_backtrace(hop + rid + b"") == (hop + rid, b"")
    assert sp_wire.split_backtrace(hop * sp_wire.MAX_HOPS + rid) is None  # too many hops: dropped
    with pytest.raises(WireError):
        sp_wire.split_backtrace(b"\x80\x00")  # too short: garbage
    with pytest.raises(WireError):
        sp_wire.split_backtrace(hop + b"\x00\x01")
