"""The bus's request events are published only while a client may watch them: a client
that said `watch_bus: false` in its hello (the Python client unless asked for the bus)
costs the daemon and every subscriber no bus traffic, while a client that never said (one
written against PROTOCOL.md before the field) gets every bus event as before.

The instrument is a plain nng client that subscribes to the bus although its hello said it
would not: what reaches it is what the daemon published. nng delivers one publisher's
messages in order, so when a later request's bus events arrive, an earlier request's
would have arrived before them."""

from __future__ import annotations

from typing import Any

import pynng
import pytest
import trio

from trunkline.protocol import codec
from trunkline.protocol.messages import (
    BusEvent,
    Finish,
    Goodbye,
    Hello,
    Message,
    Probe,
    ProbeEvent,
    ProtocolError,
    Request,
    Submit,
    WatchBus,
    WatchBusAck,
    Welcome,
)

pytestmark = pytest.mark.e2e

BUS = codec.topic_prefix(codec.BUS_TOPIC)


class PlainClient:
    """Req0 + Sub0 as PROTOCOL.md describes them, subscribed to its topic and the bus."""

    def __init__(self, control: str) -> None:
        self.control = control
        self.req = pynng.Req0(resend_time=-1, recv_timeout=10_000)
        self.sub: pynng.Sub0 | None = None
        self.client_id = ""
        self.bus: dict[str, list[str]] = {}  # request id -> the names of its bus events, in order

    async def ask(self, msg: Any) -> Any:
        await self.req.asend(codec.encode(msg))
        return codec.decode_control_reply(await self.req.arecv())

    async def hello(self, **fields: Any) -> Welcome:
        self.req.dial(self.control, block=True)
        welcome = await self.ask(Hello(client_name="plain", **fields))
        assert isinstance(welcome, Welcome)
        self.client_id = welcome.client_id
        return welcome

    async def subscribe(self, welcome: Welcome) -> None:
        self.sub = pynng.Sub0(recv_buffer_size=8192, recv_timeout=10_000)
        self.sub.subscribe(codec.topic_prefix(self.client_id))
        self.sub.subscribe(BUS)
        self.sub.dial(welcome.event_endpoint, block=True)
        while True:  # the probe handshake: until one arrives, the subscription is not live
            await self.ask(Probe(client_id=self.client_id))
            with trio.move_on_after(0.05):
                while not any(isinstance(ev, ProbeEvent) for ev in await self._next()):
                    pass
                return

    async def _next(self) -> list[Any]:
        assert self.sub is not None
        data = await self.sub.arecv()
        topic, _, body = data.partition(b"\x00")
        events = codec.decode_events(body)
        if topic + b"\x00" == BUS:
            for ev in events:
                if isinstance(ev, BusEvent) and ev.request_id:
                    self.bus.setdefault(ev.request_id, []).append(ev.name)
        return events

    async def run(self, request_id: str, *, until_bus: bool = False) -> None:
        """Submit, read to the request's end (and, with `until_bus`, to its
        `llm.call_completed` on the bus)."""
        accepted = await self.ask(
            Submit(
                request_id=request_id,
                client_id=self.client_id,
                request=Request(model="mock:echo", messages=[Message.user("hi")]),
            )
        )
        assert accepted.request_id == request_id
        finished = False
        while not finished or (until_bus and "llm.call_completed" not in self.bus.get(request_id, [])):
            for ev in await self._next():
                if isinstance(ev, Finish) and ev.request_id == request_id:
                    finished = True

    def close(self) -> None:
        self.req.close()
        if self.sub is not None:
            self.sub.close()


async def test_bus_events_of_requests_go_out_only_while_a_client_watches(daemon):
    quiet = PlainClient(daemon.control)
    try:
        with trio.fail_after(30):
            welcome = await quiet.hello(watch_bus=False)
            assert welcome.bus_on_demand
            await quiet.subscribe(welcome)
            await quiet.run("r1")  # nobody watches: no bus event of r1 is published
            assert await quiet.ask(WatchBus(client_id=quiet.client_id)) == WatchBusAck(watch=True)
            await quiet.run("r2", until_bus=True)
            assert await quiet.ask(WatchBus(client_id=quiet.client_id, watch=False)) == WatchBusAck(watch=False)
            await quiet.run("r3")
            await quiet.ask(WatchBus(client_id=quiet.client_id))
            await quiet.run("r4", until_bus=True)  # r3's would have come before these
            refused = await quiet.ask(WatchBus(client_id="c-someone-else"))
    finally:
        quiet.close()
    assert "r1" not in quiet.bus and "r3" not in quiet.bus
    assert quiet.bus["r2"] == quiet.bus["r4"] == ["llm.call_started", "llm.call_completed"]
    assert isinstance(refused, ProtocolError)


async def test_a_client_that_never_said_keeps_every_bus_event_until_it_leaves(daemon):
    quiet, older = PlainClient(daemon.control), PlainClient(daemon.control)
    try:
        with trio.fail_after(30):
            welcome = await quiet.hello(watch_bus=False)
            await quiet.subscribe(welcome)
            # Hello() leaves `watch_bus` out of the message, as a client older than it does.
            assert b"watch_bus" not in codec.encode(Hello(client_name="older"))
            older_welcome = await older.hello()
            await quiet.run("while-older", until_bus=True)
            await older.ask(Goodbye(client_id=older_welcome.client_id))
            await quiet.run("after-older")
            await quiet.ask(WatchBus(client_id=quiet.client_id))
            await quiet.run("sentinel", until_bus=True)
    finally:
        quiet.close()
        older.close()
    assert quiet.bus["while-older"] == ["llm.call_started", "llm.call_completed"]
    assert "after-older" not in quiet.bus
    assert quiet.bus["sentinel"] == ["llm.call_started", "llm.call_completed"]
