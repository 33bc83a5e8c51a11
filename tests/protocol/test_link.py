"""The link's framing: whatever the chunking, the frames come out whole and in order,
large ones (gathered in a buffer of their own) included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.protocol.link import FrameReader, frame


class SmallBig(FrameReader):
    """A reader whose "large" starts at 16 bytes, so short tests take that path too."""

    __slots__ = ()
    BIG = 16


@settings(max_examples=300)
@given(
    st.lists(st.binary(max_size=80), max_size=30),
    st.lists(st.integers(1, 64), min_size=1, max_size=50),
    st.sampled_from([FrameReader, SmallBig]),
)
def test_any_chunking_gives_every_frame_whole_and_in_order(payloads, cuts, reader_type):
    stream = b"".join(frame(p) for p in payloads)
    reader = reader_type()
    out: list[bytes] = []
    pos, i = 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        out += [bytes(f) for f in reader.feed(memoryview(stream)[pos : pos + step])]
        pos += step
        i += 1
    assert out == payloads


def test_a_large_frame_is_handed_out_as_its_own_buffer():
    reader = SmallBig()
    payload = bytes(range(100))
    data = frame(b"small") + frame(payload) + frame(b"after")
    got = reader.feed(data[:20]) + reader.feed(data[20:60]) + reader.feed(data[60:])
    assert [bytes(g) for g in got] == [b"small", payload, b"after"]
    assert type(got[1]) is bytearray and len(got[1]) == 100
