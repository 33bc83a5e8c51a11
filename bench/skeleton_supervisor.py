"""The skeleton's "supervisor" process: trunkline's hops with none of its work.

It listens on a raw Rep0 (control) and a Pub0 (events) over ipc, starts one
"worker" (`bench.skeleton_worker`) with its end of a socket pair, and for each
`submit`: decodes it, sends the job down the link, answers `accepted`; for each
message up the link: publishes the worker's terminal event on the client's topic.

    python -m bench.skeleton_supervisor CONTROL_URL EVENTS_URL UPSTREAM_BASE_URL
    <- READY <supervisor pid> <worker pid>

Control requests (msgpack maps): `{"op": "submit", "client": ..., "id": ...,
"model": ..., "messages": ..., "trace": bool}` -> `{"type": "accepted", "id": ...}`;
`{"op": "probe", "client": ...}` -> `{"type": "ok"}`, and a `{"type": "probe"}`
event on the client's topic (publish-subscribe loses what is sent before a
subscription is live: the client probes until one arrives). With `trace`, a
`{"type": "trace", "request_id": ..., "stamps": {...}}` event follows the
terminal one, as trunkline's `trace.supervisor` / `trace.worker` bus events do.
The process exits when its stdin closes, and its worker with it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import msgspec
import pynng
import trio
from pynng._nng import lib

from .skeleton_wire import SEP, Link, RawRep

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode
_OK = _encode({"type": "ok"})
_PROBE = _encode({"type": "probe"})


class Skeleton:
    def __init__(self, control: str, events: str, link: Link) -> None:
        self.rep = RawRep(control)
        self.pub = pynng.Pub0(send_buffer_size=8192)
        self.pub.listen(events)
        self._pub_handle = self.pub.socket
        self.link = link
        #: request id -> (the client's topic prefix, the supervisor's stamps or None)
        self.requests: dict[str, tuple[bytes, dict[str, int] | None]] = {}

    def publish(self, data: bytes) -> None:
        lib.nng_send(self._pub_handle, data, len(data), lib.NNG_FLAG_NONBLOCK)

    async def control(self) -> None:
        rep, link, requests = self.rep, self.link, self.requests
        while True:
            body, header = await rep.recv()
            received_ns = time.monotonic_ns()
            msg = _decode(body)
            topic = msg["client"].encode() + SEP
            if msg["op"] == "probe":
                self.publish(topic + _PROBE)
                await rep.reply(header, _OK)
                continue
            rid = msg["id"]
            stamps = {"supervisor_received": received_ns} if msg.get("trace") else None
            requests[rid] = (topic, stamps)
            job = _encode({"id": rid, "model": msg["model"], "messages": msg["messages"], "trace": stamps is not None})
            if stamps is not None:
                stamps["job_sent"] = time.monotonic_ns()  # before the send: the worker may stamp first
            await link.send(job)
            await rep.reply(header, _encode({"type": "accepted", "id": rid}))

    async def relay(self) -> None:
        requests = self.requests
        while True:
            for message in await self.link.receive():
                rid, event, worker_stamps = _decode(message)
                topic, stamps = requests.pop(rid)
                if stamps is not None:
                    stamps["terminal_received"] = time.monotonic_ns()
                self.publish(topic + event)
                if stamps is not None:
                    stamps["terminal_published"] = time.monotonic_ns()
                    stamps.update(worker_stamps or {})
                    self.publish(topic + _encode({"type": "trace", "request_id": rid, "stamps": stamps}))


async def wait_stdin_closed() -> None:
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    while await stdin.receive_some(4096):
        pass


async def main(control: str, events: str, base_url: str) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    worker = await trio.lowlevel.open_process(
        [sys.executable, "-m", "bench.skeleton_worker", f"fd:{theirs.fileno()}", base_url],
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
    )
    theirs.close()
    link = Link(ours)
    try:
        with trio.fail_after(60):
            (hello,) = await link.receive()
        if _decode(hello)[0] != "hello":
            raise RuntimeError(f"the worker said {hello!r}")
        skeleton = Skeleton(control, events, link)
        print(f"READY {os.getpid()} {worker.pid}", flush=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(skeleton.control)
            nursery.start_soon(skeleton.relay)
            await wait_stdin_closed()
            nursery.cancel_scope.cancel()
    finally:
        ours.close()  # the worker sees the end of its link and exits
        with trio.move_on_after(5):
            await worker.wait()
        if worker.returncode is None:
            worker.kill()
            await worker.wait()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
