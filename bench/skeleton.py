"""The skeleton: trunkline's processes and transports, doing nothing.

What one trunkline request crosses, built from the same parts and nothing else:
this (the benchmark) process as the client sends `submit` on a Req0 and waits for
`accepted`; a "supervisor" process (`skeleton_supervisor.py`) answers on a raw
Rep0, hands the job to a "worker" process (`skeleton_worker.py`) over a socket
pair with length-prefixed msgpack; the worker makes the floor's httpx call to the
fake upstream and sends one terminal event back; the supervisor publishes it on
Pub0, and the client's Sub0 delivers it. trio in every process, nng driven through
its readiness descriptors. No validation, request table beyond a dict, adapter,
emitter, accounting or replay ring: what the skeleton adds over the floor is the
cost of the hops themselves, and what trunkline adds beyond the skeleton is its
own work.

The skeleton's processes and its client never use trunkline's code, so it stays
the same reference while the daemon changes.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import pynng
import trio

from .floor import PROMPT
from .hops import stamps
from .procs import LineProcess
from .skeleton_wire import SEP, Receiver, send

REPO = Path(__file__).resolve().parent.parent
#: The daemon's own points, as the hop trace names trunkline's (hops.DAEMON_POINTS).
POINTS = (
    "supervisor_received",
    "job_sent",
    "job_received",
    "attempt_started",
    "reply_done",
    "terminal_emitted",
    "terminal_received",
    "terminal_published",
)

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


class SkeletonFailed(Exception):
    """The terminal event said the worker's call failed."""


class _Pending:
    __slots__ = ("done", "event", "trace", "traced")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.event: dict[str, Any] = {}
        self.traced = trio.Event()
        self.trace: dict[str, int] = {}


class Skeleton:
    """The skeleton's two processes, and its client in this process."""

    def __init__(self, upstream_port: int, log: Path, python: str = sys.executable) -> None:
        #: The supervisor's interpreter (its worker runs in the supervisor's own).
        self.python = python
        self.base_url = f"http://127.0.0.1:{upstream_port}/v1"
        self.log = log
        # Short on purpose: ipc paths must stay under 108 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="tlsk-", dir="/tmp"))
        self.proc: LineProcess | None = None
        self.supervisor_pid = 0
        self.worker_pid = 0
        self.client_id = f"skel{os.getpid()}"
        self._topic = self.client_id.encode() + SEP
        self._ids = itertools.count()
        self._pending: dict[str, _Pending] = {}
        self._probed: trio.Event | None = None
        self._req: pynng.Req0 | None = None
        self._sub: pynng.Sub0 | None = None
        self._replies: Receiver | None = None
        # A Req0 without contexts has one request in flight: calls take turns.
        self._calls = trio.Lock()
        self._reader = trio.CancelScope()
        self._reader_done = trio.Event()

    def groups(self) -> dict[str, list[int]]:
        """The processes whose CPU counts, by the names trunkline's have (the client is this process)."""
        return {"supervisor": [self.supervisor_pid], "worker": [self.worker_pid]}

    async def start(self, nursery: trio.Nursery) -> Skeleton:
        control, events = f"ipc://{self.dir}/c", f"ipc://{self.dir}/e"
        self.proc = LineProcess(
            [self.python, "-m", "bench.skeleton_supervisor", control, events, self.base_url],
            cwd=str(REPO),
            log=self.log,
        )
        await self.proc.start()
        ready = (await self.proc.readline(60)).split()
        if not ready or ready[0] != "READY":
            raise RuntimeError(f"the skeleton's supervisor said {' '.join(ready)!r}; see {self.log}")
        self.supervisor_pid, self.worker_pid = int(ready[1]), int(ready[2])
        self._req = pynng.Req0(resend_time=-1, recv_max_size=0)
        self._req.dial(control, block=True)
        self._replies = Receiver(self._req)
        self._sub = pynng.Sub0(recv_buffer_size=8192, recv_max_size=0)
        self._sub.subscribe(self._topic)
        self._sub.dial(events, block=True)
        nursery.start_soon(self._read_events, Receiver(self._sub))
        await self._probe()
        return self

    async def _call(self, request: bytes) -> bytes:
        assert self._req is not None
        assert self._replies is not None
        async with self._calls:
            await send(self._req, request)
            return await self._replies.recv()

    async def _probe(self) -> None:
        """Until the subscription is live: publish-subscribe loses what is sent before."""
        probe = _encode({"op": "probe", "client": self.client_id})
        with trio.fail_after(30):
            while True:
                self._probed = trio.Event()
                await self._call(probe)
                with trio.move_on_after(0.2):
                    await self._probed.wait()
                    return

    async def _read_events(self, receiver: Receiver) -> None:
        try:
            with self._reader:
                await self._dispatch(receiver)
        finally:
            self._reader_done.set()

    async def _dispatch(self, receiver: Receiver) -> None:
        cut = len(self._topic)
        pending = self._pending
        while True:
            data = await receiver.recv()
            event = _decode(memoryview(data)[cut:])
            kind = event["type"]
            if kind == "probe":
                if self._probed is not None:
                    self._probed.set()
                continue
            slot = pending.get(event["request_id"])
            if slot is None:
                continue
            if kind == "trace":
                slot.trace = event["stamps"]
                slot.traced.set()
            else:
                slot.event = event
                slot.done.set()

    def _request(self, model: str, rid: str, trace: bool) -> bytes:
        msg = {
            "op": "submit",
            "client": self.client_id,
            "id": rid,
            "model": model,
            "messages": PROMPT,
            "trace": trace,
        }
        return _encode(msg)

    async def complete(self, model: str) -> float:
        """One request, submit to terminal event; its wall time (what the latency table times)."""
        t0 = time.perf_counter()
        await self._submit(model, trace=False)
        return time.perf_counter() - t0

    async def _submit(self, model: str, trace: bool) -> tuple[int, dict[str, Any], _Pending]:
        rid = str(next(self._ids))
        slot = self._pending[rid] = _Pending()
        try:
            with trio.fail_after(30):
                await self._call(self._request(model, rid, trace))
                t_accepted = time.monotonic_ns()
                await slot.done.wait()
        finally:
            if not trace:
                del self._pending[rid]
        if slot.event["type"] != "finish":
            raise SkeletonFailed(slot.event.get("message", slot.event))
        return t_accepted, slot.event, slot

    async def traced(self, model: str) -> dict[str, int]:
        """One traced request: the hop trace's row (offsets in ns from the client's send)."""
        t_send = time.monotonic_ns()
        t_acc, event, slot = await self._submit(model, trace=True)
        t_done = time.monotonic_ns()
        try:
            with trio.move_on_after(2):
                await slot.traced.wait()
        finally:
            self._pending.pop(str(event["request_id"]), None)
        up_recv, (up_send, *_) = stamps(event["text"])
        row = {
            "accepted": t_acc - t_send,
            "to_upstream": up_recv - t_send,
            "upstream_service": up_send - up_recv,
            "from_upstream": t_done - up_send,
            "total": t_done - t_send,
        }
        row.update({key: slot.trace[key] - t_send for key in POINTS if slot.trace.get(key)})
        return row

    async def stop(self) -> None:
        if self._sub is not None:
            # Nothing may wait on nng's descriptors when the sockets close them.
            self._reader.cancel()
            with trio.move_on_after(5):
                await self._reader_done.wait()
        for sock in (self._req, self._sub):
            if sock is not None:
                sock.close()
        if self.proc is not None:
            await self.proc.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
