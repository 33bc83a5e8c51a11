"""The skeleton's "worker" process: takes jobs off its end of the socket pair, makes
the floor's call (`floor.HttpTarget`: the same httpx client, the same prebuilt body)
to the fake upstream, and sends one terminal event back. Nothing else: no
adapter, no emitter, no accounting.

    python -m bench.skeleton_worker fd:N UPSTREAM_BASE_URL

Link messages (msgpack): in, `{"id", "model", "messages", "trace"}`; out,
`[id, event, stamps]` where `event` is the msgpack terminal event the supervisor
publishes as it is, and `stamps` (trace only) the worker's CLOCK_MONOTONIC points.
The process exits when the link closes.
"""

from __future__ import annotations

import socket
import sys
import time
from typing import Any

import msgspec
import trio

from .floor import HttpTarget
from .skeleton_wire import Link

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


async def run_job(link: Link, target: HttpTarget, job: dict[str, Any], received_ns: int) -> None:
    trace = job.get("trace", False)
    started_ns = time.monotonic_ns() if trace else 0
    try:
        _t_send, _t_recv, text = await target.complete_text(job["model"])
        event = {"type": "finish", "request_id": job["id"], "text": text}
    except Exception as exc:  # noqa: BLE001 - the terminal event carries it, as a worker's does
        event = {"type": "error", "request_id": job["id"], "message": f"{type(exc).__name__}: {exc}"}
    stamps = None
    if trace:
        replied_ns = time.monotonic_ns()
        stamps = {"job_received": received_ns, "attempt_started": started_ns, "reply_done": replied_ns}
    data = _encode(event)
    if stamps is not None:
        stamps["terminal_emitted"] = time.monotonic_ns()
    await link.send(_encode([job["id"], data, stamps]))


async def main(spec: str, base_url: str) -> None:
    kind, _, number = spec.partition(":")
    if kind != "fd" or not number.isdigit():
        raise SystemExit(f"not a link descriptor: {spec!r}")
    link = Link(socket.socket(fileno=int(number)))
    target = HttpTarget(base_url)
    async with trio.open_nursery() as nursery:
        await link.send(_encode(["hello", b"", None]))
        while True:
            try:
                messages = await link.receive()
            except EOFError:
                break
            now = time.monotonic_ns()
            for message in messages:
                nursery.start_soon(run_job, link, target, _decode(message), now)
        nursery.cancel_scope.cancel()
    await target.aclose()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
