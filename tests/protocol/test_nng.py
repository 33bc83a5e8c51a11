"""The client's pynng wrapper: the descriptor-driven receiver takes every message as
sent, whatever its size, and says so when nothing is queued."""

from __future__ import annotations

from pathlib import Path

import pynng
import pytest
import trio

from trunkline.protocol import nng


async def test_receiver_takes_messages_of_every_size_in_order(tmp_path: Path) -> None:
    url = f"ipc://{tmp_path}/pair.ipc"
    listener = pynng.Pair1(recv_max_size=0, recv_buffer_size=16)
    listener.listen(url)
    dialer = pynng.Pair1(recv_max_size=0, send_timeout=10_000)
    dialer.dial(url, block=True)
    receiver = nng.Receiver(listener)
    assert receiver.ready() is None  # nothing queued: None, not an exception
    sent = [b"first", b"", b"x" * 300_000, bytes(range(256))]
    for data in sent:
        dialer.send(data)
    with trio.fail_after(10):
        got = [await receiver.recv() for _ in sent]
    assert got == sent
    dialer.close()
    listener.close()
    with pytest.raises(nng.Closed):
        receiver.ready()
