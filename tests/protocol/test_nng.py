"""The pynng wrappers every process uses: the daemon's raw-mode control socket answers
every request whatever the order, and the descriptor-driven receiver takes every
message as sent."""

from __future__ import annotations

from pathlib import Path

import pynng
import pytest
import trio

from trunkline.protocol import nng


@pytest.mark.parametrize("send_buffer", [0, nng.REPLY_BUFFER])
async def test_every_request_gets_its_own_reply_even_when_replies_pile_up(tmp_path: Path, send_buffer: int) -> None:
    url = f"ipc://{tmp_path}/control.ipc"
    rep = nng.Replier(url, max_size=1 << 20, send_buffer=send_buffer)
    req = pynng.Req0(resend_time=-1)
    req.dial(url, block=True)
    slow_path = 0
    areply = rep.areply

    async def counted(header: bytes, body: bytes) -> None:
        nonlocal slow_path
        slow_path += 1
        await areply(header, body)

    rep.areply = counted  # type: ignore[method-assign]
    answers: dict[int, bytes] = {}
    n = 60  # one client connection; nng queues up to 64 replies for it

    async def serve() -> None:
        held: list[tuple[bytes, bytes]] = []
        async with trio.open_nursery() as nursery:
            while len(held) < n:
                body, header, pipe = await rep.recv()
                assert pipe > 0
                held.append((header, body))
            # Answer in reverse order, all at once: most find the pipe busy.
            for header, body in reversed(held):
                if not rep.reply(header, b"re:" + body):
                    nursery.start_soon(rep.areply, header, b"re:" + body)

    async def ask(i: int) -> None:
        with req.new_context() as ctx:
            await ctx.asend(str(i).encode())
            answers[i] = await ctx.arecv()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            for i in range(n):
                nursery.start_soon(ask, i)
    req.close()
    rep.close()
    assert answers == {i: b"re:%d" % i for i in range(n)}
    if send_buffer == 0:
        assert slow_path > 0  # replies had to wait for nng, and none was lost


async def test_a_reply_to_a_client_that_has_gone_is_dropped_quietly(tmp_path: Path) -> None:
    url = f"ipc://{tmp_path}/control.ipc"
    rep = nng.replier(url, max_size=1 << 20)
    req = pynng.Req0(resend_time=-1)
    req.dial(url, block=True)
    req.send(b"hello")
    with trio.fail_after(10):
        body, header, _ = await rep.recv()
    req.close()
    # Whether or not nng has noticed the closed pipe yet, the reply is dropped, not raised.
    assert rep.reply(header, b"too late") is True
    rep.close()


async def test_receiver_takes_messages_of_every_size_in_order(tmp_path: Path) -> None:
    url = f"ipc://{tmp_path}/link.ipc"
    listener = nng.pair(url, listen=True)
    dialer = pynng.Pair1(recv_max_size=0)
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
