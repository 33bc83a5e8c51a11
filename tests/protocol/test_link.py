"""The link's framing: whatever the chunking, the frames come out whole and in order,
large ones (gathered in a buffer of their own) included."""

from __future__ import annotations

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.protocol import link
from trunkline.protocol.link import RECV_SIZE, FrameReader, frame


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


def _private_dirty_kib() -> int:
    with open("/proc/self/smaps_rollup") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith("Private_Dirty:"))


async def test_a_link_that_carried_small_messages_keeps_little_of_its_receive_buffer():
    """The supervisor holds a link per worker, and each worker one: a link that has only
    carried small messages keeps a page or so of its receive buffer, not all of it."""
    links = 32
    pairs = [link.socket_pair() for _ in range(links)]
    try:
        async with trio.open_nursery() as nursery:
            before = _private_dirty_kib()
            conns = [link.conn(ours, nursery) for ours, _ in pairs]
            for _, theirs in pairs:
                theirs.send(frame(b"hello"))
            for c in conns:
                assert await c.receive() == [b"hello"]
            grown = _private_dirty_kib() - before
            for c in conns:
                c.close()
    finally:
        for _, theirs in pairs:
            theirs.close()
    # Zero-filled buffers would be links * RECV_SIZE (8 MiB) here.
    assert grown < links * RECV_SIZE // 1024 // 8, f"{grown} KiB for {links} links"
