"""TRUNKLINE_TRACE_HOPS=1: the supervisor and the worker stamp each request's path
through them (for bench/), in order; without it nothing extra is published."""

from __future__ import annotations

import json

import trio

from trunkline import Client
from trunkline.protocol.messages import Message, Request


async def _trace_events(client: Client, request_id: str) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    while len(found) < 2:
        ev = await client.bus_events.receive()
        if ev.request_id == request_id and ev.name.startswith("trace."):
            found[ev.name] = json.loads(ev.detail)
    return found


async def test_traced_daemon_stamps_every_hop_in_order(start_daemon):
    daemon = await start_daemon(env={"TRUNKLINE_TRACE_HOPS": "1"})
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            response = await client.complete(
                Request(model="mock:echo", messages=[Message.user("trace me")]), request_id="req-traced"
            )
            stamps = await _trace_events(client, "req-traced")
    assert response.text
    sup, wrk = stamps["trace.supervisor"], stamps["trace.worker"]
    path = [
        sup["supervisor_received"],
        sup["job_sent"],
        wrk["job_received"],
        wrk["attempt_started"],
        wrk["reply_done"],
        wrk["terminal_emitted"],
        sup["terminal_received"],
        sup["terminal_published"],
    ]
    assert all(t > 0 for t in path)
    assert path == sorted(path)


async def test_untraced_daemon_publishes_no_trace_events(start_daemon):
    daemon = await start_daemon(env={"TRUNKLINE_TRACE_HOPS": "0"})
    names: list[str] = []
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            await client.complete(
                Request(model="mock:echo", messages=[Message.user("no trace")]), request_id="req-plain"
            )
            while "llm.call_completed" not in names:
                ev = await client.bus_events.receive()
                if ev.request_id == "req-plain":
                    names.append(ev.name)
            # Whatever the daemon published for it came before the end of a later request
            # (one publisher, one ordered pipe to this client).
            await client.complete(Request(model="mock:echo", messages=[Message.user("after")]))
            while True:
                try:
                    ev = client.bus_events.receive_nowait()
                except Exception:  # noqa: BLE001 - empty
                    break
                if ev.request_id == "req-plain":
                    names.append(ev.name)
    assert not [n for n in names if n.startswith("trace.")]
