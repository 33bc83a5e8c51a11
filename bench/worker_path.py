"""One worker process alone: its CPU per request, with this script in the supervisor's place.

    .venv/bin/python -m bench.worker_path [--load complete|stream] [--count 2000] [--rounds 4]
                                          [--concurrency 1] [--base OTHER/.venv/bin/python]

The worker is started as the supervisor starts it (`python -m trunkline.workers`, its
settings in `TRUNKLINE_WORKER`, its end of a socket pair inherited) and calls the fake
upstream; this process sends it jobs over the link and waits for each terminal event,
doing nothing else (no client, no nng). As the daemon does while no client watches
the bus (the Python client does not), it asks for no `llm.call_*` events. The
worker's CPU comes from `/proc/<pid>/schedstat` (nanoseconds, not 10 ms ticks), so a
few thousand requests give a stable figure.

`--base` names the interpreter of another checkout (its own venv): a worker of each is
started, and rounds alternate between them (this, base, this, base, ...), so whatever
else the machine does falls on both alike. Prints each round and the median of each:
the worker's CPU per request, and the median time from a job sent to its terminal
event received (this process's own part in that is the same for both).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import trio

from trunkline.config.catalog import Catalog
from trunkline.config.loader import ProviderConfig, RetryPolicy, TimeoutPolicy, WorkerSettings
from trunkline.protocol import codec, link
from trunkline.protocol.messages import CallEvents, Job, Message, Relay, RelayBatch, Request, WorkerUp

from .procs import LineProcess
from .run import REPO

PROVIDER = "fake"


def cpu_ns(pid: int) -> int:
    """The process's CPU time so far (its main thread: workers run no other), in ns."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


class Worker:
    """One worker process and the link to it, driven as the supervisor would."""

    def __init__(self, python: str, port: int, state_dir: Path) -> None:
        self.python = python
        self.port = port
        self.state_dir = state_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: link.LinkConn | None = None
        self.waiting: dict[str, trio.Event] = {}
        self.up = trio.Event()
        self.sent = 0

    async def start(self, nursery: trio.Nursery) -> None:
        ours, theirs = link.socket_pair()
        settings = WorkerSettings(
            name=PROVIDER,
            provider=ProviderConfig(type="openai_compat", base_url=f"http://127.0.0.1:{self.port}/v1"),
            retry=RetryPolicy(),
            timeouts=TimeoutPolicy(),
            link=f"fd:{theirs.fileno()}",
            generation=1,
            state_dir=str(self.state_dir),
            log_level="warning",
            supervisor_pid=os.getpid(),
        )
        env = {**os.environ, "TRUNKLINE_WORKER": msgspec.json.encode(settings).decode(), "TRUNKLINE_TRACE_HOPS": "0"}
        self.proc = subprocess.Popen(
            [self.python, "-m", "trunkline.workers", PROVIDER],
            env=env,
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self.conn = link.conn(ours, nursery)
        nursery.start_soon(self._read)
        with trio.fail_after(30):
            await self.up.wait()
        if self.conn.closed or self.proc.poll() is not None:
            raise RuntimeError(f"the worker of {self.python} did not start")
        # As the daemon tells its workers while no client watches the bus (the Python
        # client does not): no `llm.call_*` events.
        self.conn.send(codec.encode(CallEvents(send=False)))

    async def _read(self) -> None:
        assert self.conn is not None
        while True:
            try:
                messages = await self.conn.receive()
            except link.Closed:
                self.up.set()  # the worker is gone: `start` says so rather than wait
                return
            for data in messages:
                msg = codec.decode_from_worker(data)
                relays = msg.relays if type(msg) is RelayBatch else [msg] if type(msg) is Relay else []
                for relay in relays:
                    if relay.terminal:
                        event = self.waiting.pop(relay.request_id, None)
                        if event is not None:
                            event.set()
                if type(msg) is WorkerUp:
                    self.up.set()

    async def call(self, job_bytes: bytes, request_id: str) -> None:
        assert self.conn is not None
        done = self.waiting[request_id] = trio.Event()
        self.conn.send(job_bytes)
        await done.wait()

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.proc is not None:
            try:
                self.proc.wait(5)  # it exits when its link closes
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def job_bytes(catalog: Catalog, request_id: str, model: str, stream: bool) -> bytes:
    request = Request(model=model, messages=[Message.user("hi")])
    return codec.encode(
        Job(
            request_id=request_id,
            client_id="bench",
            request=request,
            model=catalog.resolve(model),
            stream=stream,
            operation_id=request_id,
            generation=1,
        )
    )


async def measure(
    worker: Worker, catalog: Catalog, model: str, stream: bool, count: int, concurrency: int
) -> tuple[float, float]:
    """The worker's CPU µs per request over `count` requests, `concurrency` in flight,
    and the median µs from a job sent to its terminal event received."""
    assert worker.proc is not None
    # Jobs are encoded ahead, outside the timed part: they are the supervisor's cost.
    jobs = []
    for _ in range(count):
        worker.sent += 1
        rid = f"r{worker.sent}"
        jobs.append((job_bytes(catalog, rid, model, stream), rid))
    queue = iter(jobs)
    before = cpu_ns(worker.proc.pid)

    took: list[float] = []

    async def one() -> None:
        for data, rid in queue:
            t0 = time.perf_counter()
            await worker.call(data, rid)
            took.append(time.perf_counter() - t0)

    with trio.fail_after(300):
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(one)
    return (cpu_ns(worker.proc.pid) - before) / count / 1e3, statistics.median(took) * 1e6


async def main(args: argparse.Namespace) -> None:
    upstream = await LineProcess([sys.executable, "-m", "bench.upstream"], cwd=str(REPO)).start()
    port = int((await upstream.readline()).split()[1])
    providers = {PROVIDER: ProviderConfig(type="openai_compat", base_url=f"http://127.0.0.1:{port}/v1")}
    catalog = Catalog.load(providers=providers, configured=[PROVIDER], types={PROVIDER: "openai_compat"})
    model = f"{PROVIDER}:{args.model}"
    stream = args.load == "stream"
    pythons = {"this": sys.executable}
    if args.base:
        pythons["base"] = args.base
    results: dict[str, list[float]] = {name: [] for name in pythons}
    latencies: dict[str, list[float]] = {name: [] for name in pythons}
    workers: dict[str, Worker] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="tlw-") as state:
            async with trio.open_nursery() as nursery:
                for name, python in pythons.items():
                    workers[name] = Worker(python, port, Path(state))
                    await workers[name].start(nursery)
                    await measure(workers[name], catalog, model, stream, args.warmup, args.concurrency)
                for r in range(args.rounds):
                    # Alternate which goes first, so neither always follows the other.
                    order = list(workers) if r % 2 == 0 else list(reversed(workers))
                    for name in order:
                        t0 = time.perf_counter()
                        us, p50 = await measure(workers[name], catalog, model, stream, args.count, args.concurrency)
                        wall = time.perf_counter() - t0
                        results[name].append(us)
                        latencies[name].append(p50)
                        print(
                            f"round {r + 1} {name:5s}: {us:7.1f} µs CPU/request, job to terminal p50 {p50:6.1f} µs "
                            f"({args.count / wall:.0f} req/s)"
                        )
                nursery.cancel_scope.cancel()
    finally:
        for worker in workers.values():
            worker.stop()
        await upstream.stop()
    print(f"{args.load} {model} c={args.concurrency}, median (min-max) of {args.rounds} rounds:")
    for name, values in results.items():
        lat = latencies[name]
        print(
            f"  {name:5s} CPU {statistics.median(values):7.1f} µs/request ({min(values):.1f}-{max(values):.1f}), "
            f"job to terminal p50 {statistics.median(lat):6.1f} µs ({min(lat):.1f}-{max(lat):.1f})"
        )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--load", choices=["complete", "stream"], default="complete")
    p.add_argument("--model", default="bench-c1", help="the upstream's reply shape (see bench/upstream.py)")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--base", help="the python of another checkout's venv, measured in alternate rounds")
    trio.run(main, p.parse_args())
