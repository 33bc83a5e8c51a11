"""The conformance driver: runs the scenarios in `scenarios/` against any client that
speaks the command interface (JSON lines on stdin/stdout, see README.md).

    python tests/conformance/driver.py -- path/to/client-adapter [args...]
    python tests/conformance/driver.py --scenario cancel -- ./clients/c/tl conform

For each scenario the driver starts a real daemon (the mock provider, real
sockets), starts the client program, sends the scenario's steps, and checks the
replies and events it reports against the scenario's expectations. The driver
itself also acts on the daemon (restarting it, watching its bus), which no
client command does.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# Run as a script: the tests' helpers are importable once their folder is on the path.
from helpers import DaemonProcess  # noqa: E402 - after the path above
from trunkline.client import Client  # noqa: E402 - after the path above
from trunkline.protocol.messages import AnyEvent, ControlReply  # noqa: E402 - after the path above

SCENARIOS = HERE / "scenarios"
TOKEN = "conformance-token"
#: Every wait on the client or the daemon is bounded by this (a hang fails fast).
STEP_TIMEOUT_S = 30.0


class ConformanceError(AssertionError):
    pass


def load_scenarios() -> list[dict[str, Any]]:
    return [dict(yaml.safe_load(p.read_text()), file=p.name) for p in sorted(SCENARIOS.glob("*.yaml"))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ClientProcess:
    """The client under test: a subprocess answering one JSON line per command."""

    argv: list[str]
    proc: trio.Process | None = None
    buf: bytes = b""
    transcript: list[str] = field(default_factory=list)

    async def start(self) -> None:
        self.proc = await trio.lowlevel.open_process(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    async def send(self, cmd: dict[str, Any], timeout_s: float = STEP_TIMEOUT_S) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        line = json.dumps(cmd)
        self.transcript.append("> " + line[:300])
        try:
            with trio.fail_after(timeout_s):
                await self.proc.stdin.send_all(line.encode() + b"\n")
                while b"\n" not in self.buf:
                    chunk = await self.proc.stdout.receive_some()
                    if not chunk:
                        raise ConformanceError(f"the client exited (status {self.proc.poll()}) during {cmd['cmd']}")
                    self.buf += chunk
        except trio.TooSlowError:
            raise ConformanceError(f"the client did not answer {cmd['cmd']} within {timeout_s:g}s") from None
        reply, self.buf = self.buf.split(b"\n", 1)
        self.transcript.append("< " + reply.decode(errors="replace")[:300])
        return json.loads(reply)  # type: ignore[no-any-return]

    async def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.returncode is None:
            self.proc.kill()
        with trio.move_on_after(5):
            await self.proc.wait()


def event_struct(ev: dict[str, Any]) -> Any:
    """An event the client reported, read as the protocol defines it (omitted fields take
    their defaults): a client that reports something that is no event fails here."""
    try:
        return msgspec.convert(ev, AnyEvent)
    except msgspec.ValidationError as exc:
        raise ConformanceError(f"the client reported an event that is not one: {exc}: {ev}") from None


def lookup(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(obj, dict):
            obj = obj.get(part)
        elif isinstance(obj, list):
            obj = obj[int(part)] if int(part) < len(obj) else None
        elif part == "type" and isinstance(obj, msgspec.Struct):
            obj = obj.__struct_config__.tag
        else:
            obj = getattr(obj, part, None)
    return obj


def check_fields(what: str, obj: Any, expected: dict[str, Any]) -> None:
    for path, want in expected.items():
        got = lookup(obj, path)
        if isinstance(want, str) and want.startswith("~"):
            ok = isinstance(got, str) and re.search(want[1:], got) is not None
        else:
            ok = got == want
        if not ok:
            raise ConformanceError(f"{what}: {path} is {got!r}, expected {want!r}")


def check_events(rid: str, reply: dict[str, Any], expect: dict[str, Any]) -> None:
    events = [event_struct(ev) for ev in reply["events"]]
    if not events:
        raise ConformanceError(f"{rid}: no events")
    types = [type(e).__struct_config__.tag for e in events]
    seqs = [e.seq for e in events]
    if seqs != list(range(len(events))):
        raise ConformanceError(f"{rid}: events not delivered in seq order from 0 without gaps: {seqs[:40]}")
    if any(e.request_id != rid for e in events):
        raise ConformanceError(f"{rid}: an event of another request was delivered: {types}")
    ends = [i for i, t in enumerate(types) if t in ("finish", "error")]
    if ends and ends != [len(events) - 1]:
        raise ConformanceError(f"{rid}: terminal events at {ends} of {len(events)}")
    if expect.get("complete", True) and not ends:
        raise ConformanceError(f"{rid}: no terminal event; got {' '.join(types)}")
    if "pattern" in expect and not re.fullmatch(expect["pattern"], " ".join(types)):
        raise ConformanceError(f"{rid}: event types {' '.join(types)[:400]!r} do not match {expect['pattern']!r}")
    if "text" in expect:
        deltas = "".join(e.text for e, t in zip(events, types, strict=True) if t == "text_delta")
        if deltas != expect["text"]:
            raise ConformanceError(f"{rid}: the text deltas make {deltas[:200]!r}, expected {expect['text'][:200]!r}")
    if "terminal" in expect:
        check_fields(
            f"{rid} terminal event",
            {"type": types[-1], "event": events[-1]},
            {k if k == "type" else f"event.{k}": v for k, v in expect["terminal"].items()},
        )
    for item in expect.get("has", []):
        item = dict(item)
        want_type = item.pop("type")
        if not any(t == want_type and _matches(e, item) for e, t in zip(events, types, strict=True)):
            raise ConformanceError(f"{rid}: no {want_type} event with {item}")
    if "recovered_at_least" in expect and reply.get("recovered", 0) < expect["recovered_at_least"]:
        raise ConformanceError(
            f"{rid}: recovered {reply.get('recovered')} events by replay, "
            f"expected at least {expect['recovered_at_least']}"
        )
    if reply.get("lost", 0) > expect.get("lost_at_most", 0):
        raise ConformanceError(f"{rid}: {reply['lost']} events lost")


def _matches(ev: Any, fields: dict[str, Any]) -> bool:
    try:
        check_fields("", ev, fields)
    except ConformanceError:
        return False
    return True


class Run:
    """One scenario against one client program."""

    def __init__(self, scenario: dict[str, Any], argv: list[str], nursery: trio.Nursery) -> None:
        self.scenario = scenario
        self.argv = argv
        self.nursery = nursery
        self.daemon: DaemonProcess | None = None
        self.client = ClientProcess(argv)
        self.vars: dict[str, Any] = {"token": TOKEN}
        self.watcher: Client | None = None
        self.control_url: str | None = None  # a tcp endpoint; None: the daemon's ipc one

    def config(self) -> tuple[dict[str, Any], dict[str, str]]:
        config = dict(self.scenario.get("daemon") or {})
        env: dict[str, str] = {}
        if self.scenario.get("transport") == "tcp":
            ports = free_port(), free_port()
            self.control_url = f"tcp://127.0.0.1:{ports[0]}"
            config["endpoints"] = {"control": self.control_url, "events": f"tcp://127.0.0.1:{ports[1]}"}
            env["TRUNKLINE_TOKEN"] = TOKEN
        return config, env

    async def start_daemon(self, previous: DaemonProcess | None = None) -> None:
        if previous is None:
            config, env = self.config()
            self.daemon = DaemonProcess(config, env)
        else:
            # The same runtime directory, config and endpoints: a restart, not a new daemon.
            d = DaemonProcess.__new__(DaemonProcess)
            d.dir, d.runtime_dir, d.config_path, d.env = (
                previous.dir,
                previous.runtime_dir,
                previous.config_path,
                previous.env,
            )
            d.proc, d.lines, d.ready, d.exited = None, [], trio.Event(), trio.Event()
            d._new_line = trio.Event()
            self.daemon = d
        await self.daemon.start(self.nursery)
        if self.daemon.exited.is_set():
            raise ConformanceError(f"the daemon exited at start:\n{self.daemon.output()}")
        self.vars["control"] = self.control_url or self.daemon.control

    def substitute(self, value: Any) -> Any:
        if isinstance(value, str):
            return re.sub(r"\$(\w+)", lambda m: str(self.vars.get(m.group(1), m.group(0))), value)
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        return value

    async def watch_bus(self) -> Client:
        """The driver's own connection to the daemon's bus (for `wait_bus`)."""
        if self.watcher is None:
            assert self.daemon is not None
            self.watcher = Client(
                control_endpoint=self.vars["control"], token=TOKEN, watch_bus=True, client_name="conformance-driver"
            )
            await self.watcher.__aenter__()
        return self.watcher

    async def run(self) -> None:
        await self.start_daemon()
        await self.client.start()
        try:
            for i, step in enumerate(self.scenario["steps"]):
                try:
                    await self.step(step)
                except ConformanceError as exc:
                    raise ConformanceError(
                        f"{self.scenario['file']} step {i + 1} ({step['do']}): {exc}\n"
                        "client transcript (last lines):\n  " + "\n  ".join(self.client.transcript[-12:])
                    ) from None
        finally:
            if self.watcher is not None:
                await self.watcher.aclose()
            await self.client.stop()
            if self.daemon is not None:
                if self.daemon.proc is not None and self.daemon.proc.returncode is None:
                    await self.daemon.stop()
                self.daemon.cleanup()

    async def step(self, step: dict[str, Any]) -> None:
        step = self.substitute(step)
        do = step["do"]
        expect = step.get("expect", {})
        if do == "restart_daemon":
            assert self.daemon is not None
            await self.daemon.stop()
            await self.start_daemon(previous=self.daemon)
            return
        if do == "watch_bus":
            await self.watch_bus()
            return
        if do == "wait_bus":
            watcher = await self.watch_bus()
            with trio.fail_after(STEP_TIMEOUT_S):
                async for ev in watcher.bus_events:
                    if ev.name == step["name"] and ev.operation_id == step["id"]:
                        return
            raise ConformanceError("the bus ended")  # pragma: no cover
        cmd = {k: v for k, v in step.items() if k not in ("do", "expect")}
        cmd["cmd"] = do
        if do == "connect":
            cmd.setdefault("control", self.vars["control"])
            cmd.setdefault("silence_s", 5.0)
        timeout = STEP_TIMEOUT_S + 5 if do == "events" else STEP_TIMEOUT_S
        if do == "events":
            cmd.setdefault("timeout_s", STEP_TIMEOUT_S)
        reply = await self.client.send(cmd, timeout)
        if do == "connect" and reply.get("ok"):
            self.vars["client_id"] = reply["client_id"]
        if not reply.get("ok") and "error_class" not in expect:
            raise ConformanceError(f"the client failed: {reply.get('error')}")
        if do == "call" and reply.get("ok"):
            try:  # omitted fields read as their defaults, as the protocol says
                reply["reply"] = msgspec.convert(reply["reply"], ControlReply)
            except msgspec.ValidationError as exc:
                raise ConformanceError(f"the client reported a reply that is not one: {exc}") from None
        if do == "events":
            check_events(cmd["id"], reply, expect)
        elif do == "replay":
            events = expect.pop("events", None)
            check_fields("replay", reply, expect)
            if events is not None:
                got = [type(event_struct(e)).__struct_config__.tag for e in reply["events"]]
                if not re.fullmatch(events, " ".join(got)):
                    raise ConformanceError(f"replay events {' '.join(got)!r} do not match {events!r}")
        elif "error_class" in expect and not reply.get("ok"):
            check_fields(do, reply, {"error.error_class": expect["error_class"]})
        else:
            check_fields(do, reply, expect)


async def run_scenario(scenario: dict[str, Any], argv: list[str]) -> None:
    async with trio.open_nursery() as nursery:
        await Run(scenario, argv, nursery).run()
        nursery.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", action="append", help="run only these (file names without .yaml)")
    parser.add_argument("argv", nargs="+", help="the client program and its arguments")
    args = parser.parse_args()
    failed = 0
    for scenario in load_scenarios():
        name = scenario["file"].removesuffix(".yaml")
        if args.scenario and name not in args.scenario:
            continue
        try:
            trio.run(run_scenario, scenario, args.argv)
            print(f"ok    {name}")
        except ConformanceError as exc:
            failed += 1
            print(f"FAIL  {name}: {exc}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
