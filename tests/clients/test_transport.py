"""The client's own nng wire: it survives a daemon restart, it works over tcp with a
token (and nothing works without one), many calls share one connection, and a
plain nng client (pynng, as any other language would use) gets the same service."""

from __future__ import annotations

import socket

import pynng
import pytest
import trio

from helpers import check_invariants
from trunkline import Client
from trunkline.errors import AuthenticationError, DaemonUnavailable
from trunkline.protocol import codec
from trunkline.protocol.messages import (
    Finish,
    Hello,
    Message,
    Probe,
    ProbeEvent,
    Request,
    Submit,
    Welcome,
)

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_client_survives_a_daemon_restart(daemon, nursery):
    with trio.fail_after(40):
        async with Client(daemon.runtime_dir) as client:
            assert (await client.complete("mock:echo", "before")).text == "before"
            await daemon.stop()
            with pytest.raises(DaemonUnavailable):
                await client.complete("mock:echo", "while it is down")
            daemon.ready, daemon.exited = trio.Event(), trio.Event()
            await daemon.start(nursery)
            assert (await client.complete("mock:echo", "after")).text == "after"
            async with client.stream("mock:echo", "streamed after") as stream:
                events = [ev async for ev in stream]
        # Stopped here: its output reader runs in this test's nursery, which ends with the test.
        assert await daemon.stop() == 0
    check_invariants(events)
    assert events[-1].response.text == "streamed after"


async def test_tcp_endpoints_work_with_the_token_and_refuse_everything_without_it(start_daemon):
    control, events = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    daemon = await start_daemon(
        {"endpoints": {"control": control, "events": events}}, env={"TRUNKLINE_TOKEN": "s3cret-test-token"}
    )
    with trio.fail_after(30):
        async with Client(control_endpoint=control, token="s3cret-test-token") as client:
            assert (await client.complete("mock:echo", "over tcp")).text == "over tcp"
            async with client.stream("mock:echo", "streamed over tcp") as stream:
                assert (await stream.response()).text == "streamed over tcp"
        for wrong in ("wrong", "wrong-ü"):  # a non-ASCII token is refused like any other
            with pytest.raises(AuthenticationError):
                async with Client(control_endpoint=control, token=wrong):
                    pass
        # Skipping hello does not help: every request on that connection is refused.
        sock = pynng.Req0(resend_time=-1, recv_timeout=10_000)
        sock.dial(control, block=True)
        try:
            await sock.asend(
                codec.encode(
                    Submit(
                        request_id="sneaky",
                        client_id="c1",
                        request=Request(model="mock:echo", messages=[Message.user("x")]),
                    )
                )
            )
            reply = codec.decode_control_reply(await sock.arecv())
        finally:
            sock.close()
        assert reply.error.error_class == "authentication"
    assert "s3cret-test-token" not in daemon.output()


async def test_a_tcp_control_endpoint_without_a_token_does_not_start(start_daemon):
    with pytest.raises(RuntimeError, match="needs a token: set TRUNKLINE_TOKEN"):
        await start_daemon({"endpoints": {"control": f"tcp://127.0.0.1:{free_port()}"}}, env={"TRUNKLINE_TOKEN": ""})


async def test_many_calls_in_flight_on_one_connection_each_get_their_answer(daemon):
    results: dict[int, str] = {}
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:

            async def one(i: int) -> None:
                if i % 5 == 0:
                    await client.ready("mock:echo")  # answered later than the others, by the worker
                results[i] = (await client.complete("mock:echo", f"n{i}")).text

            async with trio.open_nursery() as nursery:
                for i in range(200):
                    nursery.start_soon(one, i)
    assert results == {i: f"n{i}" for i in range(200)}


async def test_a_plain_nng_client_gets_the_same_service(daemon):
    """What a client in another language does (PROTOCOL.md): Req0 + Sub0 from libnng."""
    req = pynng.Req0(resend_time=-1, recv_timeout=10_000)
    sub = pynng.Sub0(recv_buffer_size=8192, recv_timeout=10_000)
    try:
        with trio.fail_after(30):
            req.dial(daemon.control, block=True)
            await req.asend(codec.encode(Hello(client_name="plain-nng")))
            welcome = codec.decode_control_reply(await req.arecv())
            assert type(welcome) is Welcome
            topic = codec.topic_prefix(welcome.client_id)
            sub.subscribe(topic)
            sub.dial(welcome.event_endpoint, block=True)
            while True:  # the probe handshake: until one arrives, the subscription is not live
                await req.asend(codec.encode(Probe(client_id=welcome.client_id)))
                await req.arecv()
                with trio.move_on_after(0.05):
                    if type(codec.decode_event((await sub.arecv())[len(topic) :])) is ProbeEvent:
                        break
            await req.asend(
                codec.encode(
                    Submit(
                        request_id="plain-1",
                        client_id=welcome.client_id,
                        request=Request(model="mock:echo", messages=[Message.user("one two three")]),
                    )
                )
            )
            assert codec.decode_control_reply(await req.arecv()).request_id == "plain-1"
            events = []
            while not events or type(events[-1]) is not Finish:
                # One event, or an array of them, per message.
                for ev in codec.decode_events((await sub.arecv())[len(topic) :]):
                    if type(ev) is not ProbeEvent:
                        events.append(ev)
    finally:
        req.close()
        sub.close()
    check_invariants(events)
    assert events[-1].response.text == "one two three"
