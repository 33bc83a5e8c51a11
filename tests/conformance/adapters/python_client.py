"""The conformance command interface for the Python client (`trunkline.client.Client`).

One JSON command per line on stdin, one JSON reply per line on stdout (see
tests/conformance/README.md). The client does the protocol work; this file only
translates commands to its calls and its events to JSON maps.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import msgspec
import trio

from trunkline.client import Client
from trunkline.errors import TrunklineError
from trunkline.protocol import codec
from trunkline.protocol.messages import ErrorEvent, Finish
from trunkline.routing import Route

# Fault injection: events of the subscription (never of replay) to discard once, as if
# PUB/SUB had lost them. Installed before the client binds its decoder.
_drop_seqs: set[tuple[str, int]] = set()
_drop_types: set[tuple[str, str]] = set()
_decode_events = codec.decode_events


def _lossy_decode_events(body: Any) -> list[Any]:
    kept = []
    for ev in _decode_events(body):
        rid = getattr(ev, "request_id", "")
        tag = type(ev).__struct_config__.tag
        if (rid, ev.seq) in _drop_seqs:
            _drop_seqs.discard((rid, ev.seq))
        elif (rid, tag) in _drop_types:
            _drop_types.discard((rid, tag))
        else:
            kept.append(ev)
    return kept


codec.decode_events = _lossy_decode_events  # type: ignore[assignment]  # a module function, replaced for fault injection


def _error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, TrunklineError) and exc.info is not None:
        return {"error_class": exc.info.error_class, "message": exc.info.message}
    return {"error_class": "other", "message": f"{type(exc).__name__}: {exc}"}


class Adapter:
    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.client: Client | None = None
        self.logs: dict[str, list[Any]] = {}
        self.routes: dict[str, Route] = {}
        self.changed = trio.Event()

    async def connect(self, cmd: dict[str, Any]) -> dict[str, Any]:
        client = Client(
            control_endpoint=cmd["control"],
            token=cmd.get("token"),
            silence_check_s=cmd.get("silence_s", 5.0),
            client_name="conformance-python",
        )
        try:
            await client.__aenter__()
        except TrunklineError as exc:
            return {"ok": False, "error": _error(exc)}
        self.client = client
        if cmd.get("recv_buffer"):
            assert client._connection is not None and client._connection.sub is not None
            client._connection.sub.sock.recv_buffer_size = cmd["recv_buffer"]
        assert client.welcome is not None
        return {"ok": True, "client_id": client.client_id, "max_event_bytes": client.welcome.limits.max_event_bytes}

    async def submit(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        rid = cmd["id"]
        request = codec.decode_request(codec.encode(cmd["request"]))
        try:
            accepted, route = await self.client.submit(request, stream=cmd.get("stream", True), request_id=rid)
        except TrunklineError as exc:
            return {"ok": True, "reply": "rejected", "error": _error(exc)}
        self.logs[rid] = []
        self.routes[rid] = route
        self.nursery.start_soon(self._drain, rid, route)
        return {
            "ok": True,
            "reply": "accepted",
            "model": accepted.model,
            "provider": accepted.provider,
            "duplicate": accepted.duplicate,
        }

    async def _drain(self, rid: str, route: Route) -> None:
        while (ev := await route.next_event()) is not None:
            self.logs[rid].append(msgspec.to_builtins(ev))
            self.changed.set()
            self.changed = trio.Event()
            if type(ev) in (Finish, ErrorEvent):
                break

    async def events(self, cmd: dict[str, Any]) -> dict[str, Any]:
        rid, until = cmd["id"], cmd.get("until")
        log = self.logs.get(rid, [])
        with trio.move_on_after(cmd.get("timeout_s", 30.0)):
            while not self._satisfied(log, until):
                await self.changed.wait()
        route = self.routes.get(rid)
        return {
            "ok": True,
            "events": log,
            "recovered": route.recovered if route else 0,
            "lost": route.lost if route else 0,
        }

    @staticmethod
    def _satisfied(log: list[Any], until: str | None) -> bool:
        types = [ev["type"] for ev in log]
        return bool(types) and (types[-1] in ("finish", "error") or (until is not None and until in types))

    async def call(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None and self.client._connection is not None
        assert self.client._connection.control is not None
        raw = await self.client._connection.control.call(codec.encode(cmd["message"]), False)
        return {"ok": True, "reply": msgspec.msgpack.decode(raw)}

    async def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd["cmd"]
        if op == "connect":
            return await self.connect(cmd)
        assert self.client is not None, "connect first"
        if op == "submit":
            return await self.submit(cmd)
        if op == "events":
            return await self.events(cmd)
        if op == "cancel":
            return {"ok": True, "cancelled": await self.client.cancel(cmd["id"])}
        if op == "replay":
            result = await self.client.replay(cmd["id"], cmd.get("from_seq", 0))
            return {
                "ok": True,
                "state": result.state,
                "first_seq": result.first_seq,
                "last_seq": result.last_seq,
                "events": [msgspec.msgpack.decode(raw) for raw in result.events],
            }
        if op == "status":
            report = await self.client.status()
            return {
                "ok": True,
                "client_id": self.client.client_id,
                "in_flight": report.in_flight,
                "workers": {w.name: w.state for w in report.workers},
            }
        if op == "call":
            return await self.call(cmd)
        if op == "hold":
            assert self.client._connection is not None
            self.client._connection.reader_gate = trio.Event()
            return {"ok": True}
        if op == "resume":
            assert self.client._connection is not None
            gate, self.client._connection.reader_gate = self.client._connection.reader_gate, None
            if gate is not None:
                gate.set()
            return {"ok": True}
        if op == "drop":
            _drop_seqs.update((cmd["id"], s) for s in cmd.get("seqs", []))
            _drop_types.update((cmd["id"], t) for t in cmd.get("types", []))
            return {"ok": True}
        if op == "close":
            await self.client.aclose()
            return {"ok": True}
        return {"ok": False, "error": {"error_class": "invalid_request", "message": f"unknown command {op!r}"}}


async def main() -> None:
    stdin = trio.lowlevel.FdStream(os.dup(0))
    buf = b""
    async with trio.open_nursery() as nursery:
        adapter = Adapter(nursery)
        while True:
            chunk = await stdin.receive_some()
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                cmd = json.loads(line)
                try:
                    reply = await adapter.handle(cmd)
                except TrunklineError as exc:
                    reply = {"ok": False, "error": _error(exc)}
                sys.stdout.write(json.dumps(reply) + "\n")
                sys.stdout.flush()
                if cmd["cmd"] == "close":
                    nursery.cancel_scope.cancel()
                    return
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
