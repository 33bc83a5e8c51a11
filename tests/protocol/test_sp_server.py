"""The daemon's own Rep0 and Pub0 speak nng's wire: real nng peers (pynng) talk to
them over ipc and tcp, get every reply whatever the order, get only their topic,
and a peer that breaks the protocol is dropped without disturbing the others.

The servers run in the test's own event loop, so nng peers dial without blocking."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pynng
import pytest
import trio

from trunkline.protocol import sp_wire
from trunkline.protocol.sp_conn import AddressInUse
from trunkline.protocol.sp_server import Publisher, ReplyServer
from trunkline.protocol.sp_wire import Oversize


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def endpoint(tmp_path: Path, kind: str, name: str) -> str:
    return f"ipc://{tmp_path}/{name}.ipc" if kind == "ipc" else f"tcp://127.0.0.1:{free_tcp_port()}"


@pytest.mark.parametrize("kind", ["ipc", "tcp"])
async def test_nng_requests_on_many_contexts_each_get_their_own_reply(tmp_path: Path, kind: str) -> None:
    url = endpoint(tmp_path, kind, "control")
    rep = ReplyServer(url, max_size=1 << 20)
    held: list[tuple[bytes, bytes, int]] = []
    n = 100

    def handler(body, backtrace, conn_id):
        if body.startswith(b"now:"):
            return b"re:" + body
        held.append((body, backtrace, conn_id))
        return None  # answered later, out of order

    answers: dict[int, bytes] = {}
    req = pynng.Req0(resend_time=-1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rep.serve, handler)
        req.dial(url, block=False)

        async def ask(i: int) -> None:
            with req.new_context() as ctx:
                await ctx.asend(b"now:%d" % i if i % 2 else b"later:%d" % i)
                answers[i] = await ctx.arecv()

        with trio.fail_after(20):
            async with trio.open_nursery() as asking:
                for i in range(n):
                    asking.start_soon(ask, i)
                while len(held) < n // 2:
                    await trio.sleep(0.01)
                for body, backtrace, conn_id in reversed(held):
                    assert rep.reply(conn_id, backtrace, b"re:" + body)
        nursery.cancel_scope.cancel()
    req.close()
    rep.close()
    assert answers == {i: (b"re:now:%d" if i % 2 else b"re:later:%d") % i for i in range(n)}


async def test_an_oversized_request_is_answered_without_being_buffered(tmp_path: Path) -> None:
    url = f"ipc://{tmp_path}/control.ipc"
    rep = ReplyServer(url, max_size=1000)
    seen = []

    def handler(body, backtrace, conn_id):
        seen.append(body)
        if type(body) is Oversize:
            return b"too big: %d" % body.size
        return b"ok"

    req = pynng.Req0(resend_time=-1, recv_timeout=10_000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rep.serve, handler)
        req.dial(url, block=False)
        with trio.fail_after(10):
            await req.asend(b"x" * 5_000_000)
            assert await req.arecv() == b"too big: 5000000"
            await req.asend(b"small")
            assert await req.arecv() == b"ok"
        nursery.cancel_scope.cancel()
    req.close()
    rep.close()
    assert type(seen[0]) is Oversize and seen[1] == b"small"


async def test_a_peer_that_breaks_the_protocol_is_dropped_and_others_go_on(tmp_path: Path) -> None:
    url = f"ipc://{tmp_path}/control.ipc"
    rep = ReplyServer(url, max_size=1 << 20)
    closed: list[int] = []
    rep.on_close = closed.append
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rep.serve, lambda body, bt, cid: b"re:" + body)
        path = url[len("ipc://"):]
        for garbage in (b"GET / HTTP/1.1\r\n\r\n",  # not SP at all
                        sp_wire.handshake(sp_wire.SUB0),  # the wrong protocol
                        sp_wire.handshake(sp_wire.REQ0) + b"\x01" + (2).to_bytes(8, "big") + b"\x80\x00"):  # bad backtrace
            with trio.socket.socket(socket.AF_UNIX) as raw, trio.fail_after(10):
                await raw.connect(path)
                await raw.send(garbage)
                got = b""
                while chunk := await raw.recv(100):  # until the server closes it
                    got += chunk
                assert got == sp_wire.handshake(sp_wire.REP0)
        req = pynng.Req0(resend_time=-1)
        req.dial(url, block=False)
        with trio.fail_after(10):
            await req.asend(b"still here")
            assert await req.arecv() == b"re:still here"
        req.close()
        with trio.fail_after(10):
            while len(closed) < 2:  # the two that completed a handshake as Req0 (and pynng's)
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    rep.close()


@pytest.mark.parametrize("kind", ["ipc", "tcp"])
async def test_subscribers_get_their_topic_in_order_and_a_stuck_one_costs_the_others_nothing(
        tmp_path: Path, kind: str) -> None:
    url = endpoint(tmp_path, kind, "events")
    pub = Publisher(url, max_bytes=1024 * 1024)
    lost: list[tuple[int, set[bytes]]] = []
    pub.on_lost = lambda conn_id, topics: lost.append((conn_id, topics))
    fast = pynng.Sub0(recv_buffer_size=8192)
    fast.subscribe(b"a\x00")
    # A subscriber that never reads (nng's own Sub0 always drains its pipe, so a raw one).
    family = socket.AF_UNIX if kind == "ipc" else socket.AF_INET
    stuck = trio.socket.socket(family)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pub.serve)
        fast.dial(url, block=False)
        host, _, port = url.partition("://")[2].rpartition(":")
        await stuck.connect(url[len("ipc://"):] if kind == "ipc" else (host, int(port)))
        await stuck.send(sp_wire.handshake(sp_wire.SUB0))
        with trio.fail_after(10):
            while len(pub.subscribers) < 2:
                await trio.sleep(0.01)
        n = 3000
        got: list[bytes] = []

        async def read_fast() -> None:
            while len(got) < n:
                got.append(await fast.arecv())

        with trio.fail_after(30):
            async with trio.open_nursery() as reading:
                reading.start_soon(read_fast)
                for i in range(n):
                    pub.publish(b"b\x00other %d" % i + b"." * 2000)
                    pub.publish_many([b"a\x00%d" % i]) if i % 2 else pub.publish(b"a\x00%d" % i)
                    if i % 20 == 0:
                        await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    assert got == [b"a\x00%d" % i for i in range(n)]
    assert pub.dropped > 0  # the stuck subscriber lost messages rather than holding memory
    assert lost == []  # and has not caught up, so it has not been told yet
    fast.close()
    stuck.close()
    pub.close()


async def test_a_live_listener_is_refused_and_a_stale_socket_file_is_replaced(tmp_path: Path) -> None:
    url = f"ipc://{tmp_path}/events.ipc"
    first = Publisher(url)
    with pytest.raises(AddressInUse):
        Publisher(url)
    assert stat.S_IMODE(os.stat(tmp_path / "events.ipc").st_mode) == 0o600
    first.sock.close()  # as if the daemon died: the file stays, nobody listens
    assert (tmp_path / "events.ipc").exists()
    second = Publisher(url)
    second.close()
    assert not (tmp_path / "events.ipc").exists()  # a clean stop removes its file
    with pytest.raises(ValueError, match="unsupported endpoint"):
        Publisher("ws://127.0.0.1:1/x")


async def test_a_subscriber_that_lost_messages_is_told_which_topics_once_it_caught_up(tmp_path: Path) -> None:
    url = f"ipc://{tmp_path}/events.ipc"
    pub = Publisher(url, max_bytes=64 * 1024)
    lost: list[tuple[int, set[bytes]]] = []

    def on_lost(conn_id: int, topics: set[bytes]) -> None:
        lost.append((conn_id, topics))
        pub.send_to(conn_id, b"notice\x00you lost some")

    pub.on_lost = on_lost
    slow = trio.socket.socket(socket.AF_UNIX)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pub.serve)
        await slow.connect(url[len("ipc://"):])
        await slow.send(sp_wire.handshake(sp_wire.SUB0))
        with trio.fail_after(10):
            while not pub.subscribers:
                await trio.sleep(0.001)
        for i in range(2000):  # ~2 MB while it does not read
            pub.publish(b"c1\x00" + b"x" * 1000)
            pub.publish_many([b"c2\x00" + b"y" * 10, b"c2\x00" + b"z" * 10])
        assert pub.dropped > 0 and not lost
        reader = sp_wire.FrameReader(ipc=True, expect=sp_wire.PUB0)
        got: list[bytes] = []
        with trio.fail_after(10):
            while not got or got[-1] != b"notice\x00you lost some":
                got += reader.feed(await slow.recv(65536))
        nursery.cancel_scope.cancel()
    slow.close()
    pub.close()
    assert [topics for _, topics in lost] == [{b"c1", b"c2"}]
    assert got.count(b"notice\x00you lost some") == 1
    assert 0 < len(got) - 1 < 6000  # what was kept arrived, in order, before the notice
