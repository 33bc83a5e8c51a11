"""The supervisor's and the Python client's own work for one request, without sockets:
what is left of a request's CPU once the transports are taken away, measured in one
process so that a change to it shows above this machine's noise.

    .venv/bin/python -m bench.own_work [--count 20000] [--repeats 7]

Three parts, each CPU µs per request (median of the repeats, then min-max):

* supervisor, submit: a real `Daemon` (no sockets; the worker's link takes the job
  and drops it) answering one `submit` as the control socket hands it over, bytes in,
  `accepted` bytes out: decoding, validation, the request table, the job to the worker;
* supervisor, relay: the link message a worker sends for a request answered whole
  (its `finish` event; with no client watching the bus, as with the Python client, the
  worker sends no `llm.call_*` event), bytes in, down to the request's end (its replay
  ring, its log line at the daemon's default `info`);
* client, complete: `Client.complete` on a built request, its control socket answering
  at once and its event socket delivering the `finish` (the transport's own work is
  not counted: the fakes hand over bytes prepared before the clock starts).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import msgspec
import trio
import yaml

from trunkline import Client
from trunkline.client import build_request
from trunkline.config.loader import load_config
from trunkline.connection import Connection
from trunkline.protocol import codec
from trunkline.protocol.codec import frame_event
from trunkline.protocol.messages import (
    Accepted,
    BusEvent,
    Finish,
    FinishReason,
    Hello,
    Limits,
    Message,
    Relay,
    Response,
    Submit,
    Usage,
    Welcome,
)
from trunkline.routing import Route
from trunkline.supervisor.daemon import Daemon
from trunkline.supervisor.request_log import DAEMON_FORMAT, BatchingStreamHandler
from trunkline.tls import ClientTLS

from .trunkline_runner import OPENAI_PROVIDER, bench_config

MODEL = f"{OPENAI_PROVIDER}:gpt-4o-mini"
#: Requests submitted before their ends are relayed (below the per-connection limit).
BATCH = 500
TEXT = "".join(f"tok{i} " for i in range(50))


def finish_event(request_id: str) -> Finish:
    """The terminal event of the benchmark's whole answer (50 tokens of text)."""
    return Finish(
        request_id=request_id,
        seq=0,
        response=Response(
            id="chatcmpl-bench",
            model="gpt-4o-mini",
            provider=OPENAI_PROVIDER,
            message=Message.assistant(TEXT),
            finish_reason=FinishReason(reason="stop", raw="stop"),
            usage=Usage(input_tokens=12, output_tokens=50, total_tokens=62),
            latency_ms=4.1,
        ),
    )


def bus_events(request_id: str) -> list[BusEvent]:
    common: dict[str, Any] = {
        "request_id": request_id,
        "provider": OPENAI_PROVIDER,
        "model": MODEL,
        "operation_id": request_id,
        "attempt_id": f"{request_id}:attempt_1",
        "attempt": 1,
    }
    return [
        BusEvent(name="llm.call_started", **common),
        BusEvent(
            name="llm.call_completed",
            retry_count=0,
            latency_ms=4.1,
            usage=Usage(input_tokens=12, output_tokens=50, total_tokens=62),
            **common,
        ),
    ]


class _Link:
    """The worker's end of a link: takes every message, keeps none."""

    closed = False
    pending = 0

    def send(self, payload: bytes) -> bool:
        return True

    def close(self) -> None:
        pass


class _Published:
    def publish(self, frame: bytes) -> None:
        pass

    def publish_many(self, messages: list[bytes]) -> None:
        pass


def _median(samples: list[float]) -> str:
    return f"{statistics.median(samples):7.1f} µs  ({min(samples):.1f}-{max(samples):.1f})"


def _per_op(fn: Any, items: list[Any]) -> float:
    t0 = time.process_time_ns()
    for item in items:
        fn(item)
    return (time.process_time_ns() - t0) / len(items) / 1000


async def supervisor(count: int, repeats: int, tmp: Path) -> tuple[list[float], list[float]]:
    config_path = tmp / "config.yaml"
    config_path.write_text(yaml.safe_dump(bench_config(1, tmp / "state")))
    daemon = Daemon(load_config(str(config_path)), runtime_dir=tmp / "run")
    daemon.events.pub = _Published()
    slot = daemon.slots[OPENAI_PROVIDER]
    slot.state = "running"
    slot.generation = 1
    slot.link = _Link()  # type: ignore[assignment]  # a stand-in with the methods the slot calls
    router = daemon.router
    # As the Python client says hello: it does not watch the bus, so the daemon neither
    # publishes requests' bus events nor has its workers send the attempts' own.
    welcome = codec.decode_control_reply(router.on_request(codec.encode(Hello(watch_bus=False)), b"h", 1) or b"")
    assert isinstance(welcome, Welcome)
    request = build_request(MODEL, "hi")
    submits_us: list[float] = []
    relays_us: list[float] = []
    for r in range(repeats):
        ids = [f"req_{r:02d}{i:024d}" for i in range(count)]
        submits = [
            codec.encode(Submit(request_id=rid, client_id=welcome.client_id, request=request, stream=False))
            for rid in ids
        ]
        links = []
        for rid in ids:
            frame = frame_event(welcome.client_id, finish_event(rid))
            links.append(codec.encode(Relay(request_id=rid, frames=[frame], last_seq=0, terminal=True)))

        def submit(data: bytes) -> None:
            reply = router.on_request(data, b"h", 1)
            if reply is None or b"accepted" not in reply[:20]:
                raise RuntimeError(f"submit refused: {reply!r}")

        # In batches: a connection may have at most `max_requests_per_client` running.
        submit_us = relay_us = 0.0
        for at in range(0, count, BATCH):
            submit_us += _per_op(submit, submits[at : at + BATCH]) * len(submits[at : at + BATCH])
            relay_us += _per_op(slot._on_message, links[at : at + BATCH]) * len(links[at : at + BATCH])
        submits_us.append(submit_us / count)
        relays_us.append(relay_us / count)
        assert not daemon.requests.active, "every request ended"
    return submits_us, relays_us


class _Receiver:
    """The event socket: messages handed to it, taken by the client's reader."""

    def __init__(self) -> None:
        self.queue: deque[bytes] = deque()
        self.wake = trio.Event()

    def ready_many(self, limit: int = 64) -> list[bytes]:
        out = list(self.queue)
        self.queue.clear()
        return out

    async def recv_many(self, limit: int = 64) -> list[bytes]:
        while not self.queue:
            self.wake = trio.Event()
            await self.wake.wait()
        return self.ready_many()

    wait_many = recv_many

    def put(self, data: bytes) -> None:
        self.queue.append(data)
        self.wake.set()


class _Subscriber:
    def __init__(self) -> None:
        self.receiver = _Receiver()

    def close(self) -> None:
        pass


class _Id(msgspec.Struct):
    request_id: str


class _Requester:
    """The control socket: answers a submit at once with prepared bytes, and hands its
    terminal event to the event socket (what the daemon does, minus the daemon)."""

    connects = 0
    drops = 0

    def __init__(self, events: _Receiver, client_id: str) -> None:
        self.events = events
        self.client_id = client_id
        self._id = msgspec.msgpack.Decoder(_Id)
        self.prepared: dict[str, tuple[bytes, bytes]] = {}

    def prepare(self, request_id: str) -> None:
        accepted = codec.encode(Accepted(request_id=request_id, provider=OPENAI_PROVIDER, model=MODEL))
        self.prepared[request_id] = (accepted, frame_event(self.client_id, finish_event(request_id)))

    async def call(self, data: bytes, slow: bool = False, timeout_s: float | None = None) -> bytes:
        accepted, event = self.prepared.pop(self._id.decode(data).request_id)
        self.events.put(event)
        return accepted

    def close(self) -> None:
        pass


async def client(count: int, repeats: int) -> list[float]:
    connection = Connection(
        "ipc:///nowhere", client_name="bench", token=None, timeout_s=30.0, silence_check_s=5.0, tls=ClientTLS()
    )
    connection.client_id = "c01BENCHCLIENT"
    connection.welcome = Welcome(
        client_id=connection.client_id,
        server_version="bench",
        event_endpoint="ipc:///nowhere",
        limits=Limits(max_message_bytes=16 << 20, replay_ring_events=1000, replay_keep_s=60.0),
    )
    sub = _Subscriber()
    control = _Requester(sub.receiver, connection.client_id)
    connection.control = control  # type: ignore[assignment]  # stand-ins for the sockets
    connection._new_event = trio.Event  # what `connect` chooses inside trio
    connection.sub = sub  # type: ignore[assignment]
    tl = Client("/nowhere")
    tl._connection = connection
    request = build_request(MODEL, "hi")
    out: list[float] = []
    ids = iter(range(10**9))
    original_route = connection.route

    def route(request_id: str) -> Route:
        control.prepare(request_id)  # outside the clock would be better; it is the same for every version
        return original_route(request_id)

    connection.route = route  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection._read_events)
        for _ in range(repeats):
            gc.collect()
            t0 = time.process_time_ns()
            for _ in range(count):
                response = await tl.complete(request)
                assert response.usage.output_tokens == 50
            out.append((time.process_time_ns() - t0) / count / 1000)
            next(ids)
        nursery.cancel_scope.cancel()
    return out


async def main(count: int, repeats: int) -> None:
    # As the daemon logs (its handler and format), to a file that is not kept.
    devnull = os.open(os.devnull, os.O_WRONLY)  # open for the process's life, as the daemon's stderr
    logging.basicConfig(level="INFO", format=DAEMON_FORMAT, handlers=[BatchingStreamHandler(devnull)])
    with tempfile.TemporaryDirectory(prefix="tl-own-") as tmp:
        submits, relays = await supervisor(count, repeats, Path(tmp))
    print(f"supervisor, submit   {_median(submits)}")
    print(f"supervisor, relay    {_median(relays)}")
    print(f"supervisor, total    {_median([a + b for a, b in zip(submits, relays, strict=True)])}")
    print(f"client, complete     {_median(await client(count, repeats))}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--count", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    trio.run(main, a.count, a.repeats)
