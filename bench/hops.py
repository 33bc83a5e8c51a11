"""Where the time of one request goes, hop by hop.

Every process on the machine reads the same CLOCK_MONOTONIC, so timestamps
taken in different processes can be subtracted. The sources:

* the client: when it sends `submit`, gets `accepted`, sees each event;
* the fake upstream, in trace mode (`t` in the model name): the content it
  returns carries `R<ns>` (request read) and `S<ns>` (each chunk written);
* the daemon itself, started with `TRUNKLINE_TRACE_HOPS=1`: the supervisor's
  `trace.supervisor` bus event (submit received, job sent to the worker,
  terminal event received from the worker, published) and the worker's
  `trace.worker` (job received, attempt started, reply done, terminal event
  emitted), one each per request.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from trunkline import Client
from trunkline.protocol.messages import ErrorEvent, Finish, TextDelta

from .floor import HttpTarget
from .stats import median, percentile
from .trunkline_runner import TrunklineOps

if TYPE_CHECKING:
    from .skeleton import Skeleton  # which reads the upstream's clocks with `stamps` here

_STAMP = re.compile(r"([RS])(\d+)")
#: The whole-response request traced: one content chunk, as the latency table's
#: `bench-c1`. (The worker streams even a whole-response request from its provider,
#: so with the default 50 chunks the trace timed 50 SSE events read by trunkline
#: against one JSON body read by the floor.)
COMPLETE_MODEL = "bench-c1-t"

#: The daemon's own points (TRUNKLINE_TRACE_HOPS), in the order a request passes them.
DAEMON_POINTS = (
    "supervisor_received",
    "job_sent",
    "job_received",
    "attempt_started",
    "reply_done",
    "terminal_emitted",
    "terminal_received",
    "terminal_published",
)


def stamps(text: str) -> tuple[int, list[int]]:
    """The upstream's receive clock and its send clocks, from trace content."""
    recv = 0
    sends: list[int] = []
    for kind, value in _STAMP.findall(text):
        if kind == "R":
            recv = int(value)
        else:
            sends.append(int(value))
    return recv, sends


def summarize(rows: Sequence[dict[str, int]]) -> dict[str, dict[str, float]]:
    """Median and p99, in microseconds, of every offset recorded per request."""
    out: dict[str, dict[str, float]] = {}
    for key in rows[0] if rows else ():
        values = sorted(r[key] / 1000 for r in rows if key in r)
        out[key] = {"p50": median(values), "p99": percentile(values, 99), "n": len(values)}
    return out


async def floor_complete(target: HttpTarget) -> dict[str, int]:
    t_send, t_recv, text = await target.complete_text(COMPLETE_MODEL)
    up_recv, (up_send, *_) = stamps(text)
    return {
        "to_upstream": up_recv - t_send,
        "upstream_service": up_send - up_recv,
        "from_upstream": t_recv - up_send,
        "total": t_recv - t_send,
    }


async def floor_stream(target: HttpTarget) -> dict[str, int]:
    t_send, texts, t_done = await target.stream_trace("bench-c50-t")
    up_recv, first_sends = stamps(texts[0][1])
    last_send = stamps(texts[-1][1])[1][-1]
    return {
        "to_upstream": up_recv - t_send,
        "first_chunk_leg": texts[0][0] - first_sends[0],
        "last_chunk_leg": t_done - last_send,
        "ttft": texts[0][0] - t_send,
        "total": t_done - t_send,
    }


class TrunklineTrace:
    """The same two requests through trunkline, with the bus watched for `llm.call_started`."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.ops = TrunklineOps(client)
        self.started: dict[str, int] = {}
        self.stamps: dict[str, dict[str, int]] = {}  # request id -> the daemon's own stamps
        self._arrived = trio.Event()

    async def watch_bus(self) -> None:
        async for ev in self.client.bus_events:
            if ev.name == "llm.call_started":
                self.started.setdefault(ev.request_id, time.monotonic_ns())
            elif ev.name in ("trace.supervisor", "trace.worker") and ev.detail:
                self.stamps.setdefault(ev.request_id, {}).update(json.loads(ev.detail))
                self._arrived.set()

    async def daemon_stamps(self, request_id: str, t_send: int) -> dict[str, int]:
        """The daemon's stamps for a request, as offsets from the client's send (empty
        if the daemon does not trace)."""
        with trio.move_on_after(2):
            while len(self.stamps.get(request_id, ())) < len(DAEMON_POINTS):
                self._arrived = trio.Event()
                await self._arrived.wait()
        got = self.stamps.pop(request_id, {})
        return {key: got[key] - t_send for key in DAEMON_POINTS if got.get(key)}

    async def complete(self) -> dict[str, int]:
        client = self.client
        request = self.ops.request(f"fake:{COMPLETE_MODEL}")
        t_send = time.monotonic_ns()
        _accepted, route = await client.submit(request, stream=False)
        t_acc = time.monotonic_ns()
        ev = await route.next_event()  # a non-streamed request has one event, its terminal
        t_done = time.monotonic_ns()
        if type(ev) is not Finish:
            raise RuntimeError(f"trace request failed: {ev}")
        await trio.sleep(0)  # let the bus watcher stamp what arrived before the finish
        up_recv, (up_send, *_) = stamps(ev.response.text)
        row = {
            "accepted": t_acc - t_send,
            "to_upstream": up_recv - t_send,
            "upstream_service": up_send - up_recv,
            "from_upstream": t_done - up_send,
            "total": t_done - t_send,
        }
        if route.request_id in self.started:
            row["call_started_seen"] = self.started.pop(route.request_id) - t_send
        row.update(await self.daemon_stamps(route.request_id, t_send))
        return row

    async def stream(self) -> dict[str, int]:
        texts: list[tuple[int, str]] = []
        t_send = time.monotonic_ns()
        async with self.client.stream(self.ops.request("fake:bench-c50-t")) as s:
            await s.start()
            t_acc = time.monotonic_ns()
            async for ev in s:
                if type(ev) is TextDelta:
                    texts.append((time.monotonic_ns(), ev.text))
                elif type(ev) is ErrorEvent:
                    raise RuntimeError(f"trace stream failed: {ev.error.message}")
            t_done = time.monotonic_ns()
        await trio.sleep(0)
        # A delta may hold several chunks' text if the worker read them together.
        up_recv, first_sends = stamps(texts[0][1])
        last_send = stamps(texts[-1][1])[1][-1]
        row = {
            "accepted": t_acc - t_send,
            "to_upstream": up_recv - t_send,
            "first_chunk_leg": texts[0][0] - first_sends[0],
            "last_chunk_leg": t_done - last_send,
            "ttft": texts[0][0] - t_send,
            "total": t_done - t_send,
        }
        if s.request_id in self.started:
            row["call_started_seen"] = self.started.pop(s.request_id) - t_send
        row.update(await self.daemon_stamps(s.request_id, t_send))
        return row


async def trace(
    target: HttpTarget, runtime_dir: str, n: int, skeleton: Skeleton | None = None
) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Floor, trunkline and skeleton requests alternate, so that whatever else the
    machine does at a given moment falls on all alike. (The skeleton makes no stream.)"""
    rows: dict[str, dict[str, list[dict[str, int]]]] = {
        "floor": {"complete": [], "stream": []},
        "trunkline": {"complete": [], "stream": []},
    }
    if skeleton is not None:
        rows["skeleton"] = {"complete": []}
    async with Client(runtime_dir, client_name="bench-hops", watch_bus=True) as client:
        tl = TrunklineTrace(client)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tl.watch_bus)
            for _ in range(n):
                rows["floor"]["complete"].append(await floor_complete(target))
                rows["trunkline"]["complete"].append(await tl.complete())
                if skeleton is not None:
                    rows["skeleton"]["complete"].append(await skeleton.traced(COMPLETE_MODEL))
                rows["floor"]["stream"].append(await floor_stream(target))
                rows["trunkline"]["stream"].append(await tl.stream())
            nursery.cancel_scope.cancel()
    return {system: {kind: summarize(r) for kind, r in kinds.items()} for system, kinds in rows.items()}


async def control_round_trip(runtime_dir: str, n: int) -> dict[str, float]:
    """`status` round trips: the bare cost of one control message, to set `submit` against."""
    async with Client(runtime_dir, client_name="bench-rtt") as client:
        values = []
        for _ in range(n):
            t0 = time.monotonic_ns()
            await client.status()
            values.append((time.monotonic_ns() - t0) / 1000)
    values.sort()
    return {"p50": median(values), "p99": percentile(values, 99), "n": len(values)}
