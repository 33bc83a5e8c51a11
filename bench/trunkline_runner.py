"""trunkline under test: `trunkline serve` as a separate process, configured to call the
fake upstream, and the operations the benchmark runs through the real Python client.

Every stage but the hop trace and the HTTP stage runs one daemon, untraced,
exactly as a user starts it (`python -m trunkline.cli serve --config ...
--runtime-dir ...`): all they report about it is read from its sockets, /proc and
the `bus` events it publishes anyway. The hop-trace stage runs a second daemon,
started the same way but with `TRUNKLINE_TRACE_HOPS=1`, the daemon's opt-in
setting under which the supervisor and the worker also publish `trace.supervisor`
/ `trace.worker` bus events holding CLOCK_MONOTONIC stamps of each request's path
(see `hops.py`). The HTTP stage runs a daemon of its own with its front door on
(`http.listen`, one process, a key asked for as a user would configure it): the
door is one more client of its daemon, and on the first daemon its subscription
would receive, and its process would pay for, every event of the other stages.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio
import yaml

from trunkline import Client
from trunkline.client import build_request
from trunkline.protocol.messages import ErrorEvent, Finish, Request, TextDelta

from .procs import pss_mb, rss_mb, terminate

#: The worker that serves the benchmark's OpenAI-compatible traffic.
OPENAI_PROVIDER = "fake"
ANTHROPIC_PROVIDER = "fakeant"
#: The key the front door asks for in the HTTP stage (`Authorization: Bearer`).
DOOR_KEY = "tl-bench-door-key"


def bench_config(port: int, state_dir: Path) -> dict:
    """Five workers, as a typical installation has: the mock, two OpenAI-compatible
    servers, an Anthropic and an Ollama endpoint, all pointed at the fake upstream."""
    upstream = f"http://127.0.0.1:{port}"
    return {
        "state_dir": str(state_dir),
        "providers": {
            "openrouter": {"enabled": False},
            "anthropic": {"enabled": False},
            "openai": {"enabled": False},
            "gemini": {"enabled": False},
            "ollama": {"base_url": upstream},
            # 1,200 connections: the memory test holds 1,000 streams open at once, and
            # the floor client gets the same pool size.
            OPENAI_PROVIDER: {"type": "openai_compat", "base_url": f"{upstream}/v1", "max_connections": 1200},
            ANTHROPIC_PROVIDER: {
                "type": "anthropic",
                "base_url": upstream,
                "api_key_env": "FAKE_ANTHROPIC_KEY",
                "max_connections": 1200,
            },
            "fake2": {"type": "openai_compat", "base_url": f"{upstream}/v1"},
        },
    }


@dataclass
class Daemon:
    upstream_port: int
    log_path: Path
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tlb-", dir="/tmp")))
    proc: trio.Process | None = None
    pid: int = 0
    workers: dict[str, int] = field(default_factory=dict)
    version: str = ""
    #: Start with TRUNKLINE_TRACE_HOPS=1: the daemon stamps each request's path through it.
    trace_hops: bool = False
    #: Config merged over the benchmark's (e.g. `{"metrics": {"listen": ...}}`).
    extra: dict = field(default_factory=dict)
    #: Environment variables for the daemon (e.g. OTEL_TRACES_SAMPLER).
    env: dict = field(default_factory=dict)
    #: Serve the HTTP front door (one process, on a free port of 127.0.0.1, asking for DOOR_KEY).
    http: bool = False
    #: Where the front door serves, and its process ids (not among `workers`).
    http_url: str = ""
    doors: list[int] = field(default_factory=list)
    #: How often `start` looks for the log line and then for every worker up (the warm-start
    #: stage times the start, so it looks more often).
    poll_s: float = 0.05
    #: The interpreter the daemon's supervisor runs in (`bench.instructions` puts it under
    #: valgrind; its workers are started with the supervisor's own interpreter).
    python: str = sys.executable

    @property
    def runtime_dir(self) -> Path:
        # Short on purpose: ipc paths must stay under 108 bytes.
        return self.dir / "run"

    async def start(self, timeout_s: float = 30.0) -> Daemon:
        config = self.dir / "config.yaml"
        settings = {**bench_config(self.upstream_port, self.dir / "state"), **self.extra}
        if self.http:
            settings["http"] = {"listen": "127.0.0.1:0", "keys_env": ["BENCH_DOOR_KEY"]}
        config.write_text(yaml.safe_dump(settings))
        env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENROUTER_API_KEY")}
        env["FAKE_ANTHROPIC_KEY"] = "bench-key"
        env["BENCH_DOOR_KEY"] = DOOR_KEY
        # Set either way, so a TRUNKLINE_TRACE_HOPS=1 left in the caller's environment
        # cannot turn tracing on in a daemon meant to run untraced.
        env["TRUNKLINE_TRACE_HOPS"] = "1" if self.trace_hops else "0"
        env.update(self.env)
        argv = [
            self.python,
            "-m",
            "trunkline.cli",
            "serve",
            "--config",
            str(config),
            "--runtime-dir",
            str(self.runtime_dir),
        ]
        # Straight to a file: piping the log through the benchmark process would bill its
        # reading to the client's CPU.
        with open(self.log_path, "ab") as log:
            self.proc = await trio.lowlevel.open_process(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL
            )
        self.pid = self.proc.pid
        start = self.log_path.stat().st_size
        with trio.fail_after(timeout_s):
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"trunkline serve exited with {self.proc.returncode}; see {self.log_path}")
                with open(self.log_path, "rb") as log:
                    log.seek(start)
                    said = log.read()
                door = re.search(rb"HTTP front door on (http://\S+)", said) if self.http else None
                if b"serving" in said and (door is not None or not self.http):
                    break
                await trio.sleep(self.poll_s)
            if door is not None:
                self.http_url = door.group(1).decode()
            await self._wait_workers_running()
        return self

    async def _wait_workers_running(self) -> None:
        async with Client(self.runtime_dir, client_name="bench-status") as client:
            while True:
                status = await client.status()
                self.version = status.server_version
                if status.workers and all(w.state == "running" for w in status.workers):
                    # The front door's processes are listed among the workers; they call no provider.
                    self.workers = {w.provider: w.pid for w in status.workers if w.pid and w.provider_type != "http"}
                    self.doors = [w.pid for w in status.workers if w.pid and w.provider_type == "http"]
                    return
                await trio.sleep(self.poll_s)

    def worker_pids(self) -> list[int]:
        return list(self.workers.values())

    def rss(self) -> dict[str, float]:
        return self._each(rss_mb)

    def pss(self) -> dict[str, float]:
        return self._each(pss_mb)

    def _each(self, read: Callable[[int], float]) -> dict[str, float]:
        out = {"supervisor": read(self.pid)}
        for name, pid in self.workers.items():
            out[f"worker {name}"] = read(pid)
        return out

    async def in_flight(self) -> int:
        async with Client(self.runtime_dir, client_name="bench-status") as client:
            return (await client.status()).in_flight

    async def stop(self, timeout_s: float = 20.0) -> None:
        if self.proc is not None:
            await terminate(self.proc, timeout_s)
        shutil.rmtree(self.dir, ignore_errors=True)


class TrunklineOps:
    """The requests the benchmark makes through `trunkline.Client`. Requests are built
    once: a real program builds its request too, but that cost is the caller's
    choice of API, not trunkline's."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._requests: dict[str, Request] = {}

    def request(self, model: str) -> Request:
        req = self._requests.get(model)
        if req is None:
            req = self._requests[model] = build_request(model, "hi")
        return req

    async def complete(self, model: str) -> float:
        t0 = time.perf_counter()
        await self.client.complete(self.request(model))
        return time.perf_counter() - t0

    async def stream(self, model: str) -> tuple[float, float, int, int, int, int]:
        """(time to first text, time to the terminal event, text deltas, all events,
        events lost, events recovered by replay)."""
        t0 = time.perf_counter()
        first = 0.0
        deltas = events = 0
        async with self.client.stream(self.request(model)) as stream:
            async for ev in stream:
                events += 1
                if type(ev) is TextDelta:
                    deltas += 1
                    if not first:
                        first = time.perf_counter() - t0
                elif type(ev) is ErrorEvent:
                    raise RuntimeError(f"stream ended with {ev.error.error_class}: {ev.error.message}")
                elif type(ev) is Finish:
                    break
            lost, recovered = stream.lost_events, stream.recovered_events
        return first, time.perf_counter() - t0, deltas, events, lost, recovered
