"""The client's side of the wire against the daemon's (both in this process): many
calls at once each get their own answer, however the server orders them; a large
message arrives whole; a daemon that goes away fails the waiting calls at once;
events that share a read with the publisher's handshake are not lost."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from trunkline.protocol import sp_wire
from trunkline.protocol.sp_server import Publisher, ReplyServer
from trunkline.transport import ControlSocket, Disconnected, EventSocket


def body_of(i: int) -> bytes:
    """Every third call is answered later, out of order; call 7 is 5 MB (many writes)."""
    return b"later %d" % i if i % 3 == 0 else b"now %d " % i + b"x" * (5_000_000 if i == 7 else 0)


async def test_concurrent_calls_each_get_their_answer_in_any_order(tmp_path: Path) -> None:
    url = f"ipc://{tmp_path}/c.ipc"
    server = ReplyServer(url, max_size=1 << 24)
    held = []

    def handler(body, backtrace, conn_id):
        if body.startswith(b"later"):
            held.append((backtrace, conn_id, body))
            return None
        return b"re:" + body[:20]

    answers = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve, handler)
        control = ControlSocket(url)

        async def ask(i: int) -> None:
            answers[i] = await control.call(body_of(i))

        with trio.fail_after(20):
            async with trio.open_nursery() as asking:
                for i in range(60):
                    asking.start_soon(ask, i)
                while len(held) < 20:
                    await trio.sleep(0.001)
                for backtrace, conn_id, body in reversed(held):
                    server.reply(conn_id, backtrace, b"re:" + body)
        control.close()
        nursery.cancel_scope.cancel()
    server.close()
    assert answers == {i: b"re:" + (body_of(i) if i % 3 == 0 else body_of(i)[:20]) for i in range(60)}


async def test_a_daemon_that_goes_away_fails_every_waiting_call_at_once(tmp_path: Path) -> None:
    url = f"ipc://{tmp_path}/c.ipc"
    server = ReplyServer(url, max_size=1 << 20)
    errors = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve, lambda body, bt, cid: None)  # never answers
        control = ControlSocket(url)

        async def ask() -> None:
            try:
                await control.call(b"anyone?")
            except Disconnected as exc:
                errors.append(exc)

        with trio.fail_after(10):
            async with trio.open_nursery() as asking:
                for _ in range(5):
                    asking.start_soon(ask)
                while len(server.conns) < 1:
                    await trio.sleep(0.001)
                await trio.sleep(0.05)
                server.close()
        nursery.cancel_scope.cancel()
    assert len(errors) == 5


async def test_events_that_arrive_with_the_handshake_are_kept(tmp_path: Path) -> None:
    path = str(tmp_path / "e.ipc")
    listener = trio.socket.socket(socket.AF_UNIX)
    await listener.bind(path)
    listener.listen()

    async def eager_publisher() -> None:
        conn, _ = await listener.accept()
        with conn:
            # Header and two events in one write, before reading the subscriber's header.
            await conn.send(sp_wire.handshake(sp_wire.PUB0) + sp_wire.frame_ipc(b"me\x00first")
                            + sp_wire.frame_ipc(b"other\x00not mine") + sp_wire.frame_ipc(b"me\x00second"))
            await conn.recv(8)
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(eager_publisher)
        events = EventSocket(f"ipc://{path}", (b"me\x00",))
        with trio.fail_after(10):
            await events.connect()
            got = await events.receive()
        events.close()
        nursery.cancel_scope.cancel()
    assert got == [b"me\x00first", b"me\x00second"]


async def test_the_event_socket_gets_only_its_topics_from_the_daemons_publisher(tmp_path: Path) -> None:
    url = f"ipc://{tmp_path}/e.ipc"
    pub = Publisher(url)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pub.serve)
        events = EventSocket(url, (b"c1\x00",))
        with trio.fail_after(10):
            await events.connect()
            while not pub.subscribers:
                await trio.sleep(0.001)
            pub.publish_many([b"c12\x00no", b"c1\x00yes", b"bus\x00no"])
            got = await events.receive()
            events.subscribe(b"bus\x00")
            pub.publish(b"bus\x00now yes")
            got += await events.receive()
        events.close()
        nursery.cancel_scope.cancel()
    pub.close()
    assert got == [b"c1\x00yes", b"bus\x00now yes"]


async def test_nothing_listening_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises((FileNotFoundError, ConnectionRefusedError)):
        await ControlSocket(f"ipc://{tmp_path}/none.ipc").connect()
