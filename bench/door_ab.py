"""The HTTP front door of this checkout against another's, in turns: one request at a time.

    .venv/bin/python -m bench.door_ab --base OTHER/.venv/bin/python [--rounds 8] [--count 500]

Each checkout's own `trunkline serve` (the benchmark's config, its door asking for a
key) calls one fake upstream; the floor's kind of client (httpx, keep-alive, a JSON
body) sends `/v1/chat/completions` to one door, then the other, `--count` requests a
round, the order swapped every round, so whatever else the machine does falls on both
alike. Prints each round's p50 and the CPU per request of the daemon's processes that
serve it (door, supervisor, the worker that calls the upstream), then the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import httpx
import trio

from .procs import LineProcess
from .run import REPO
from .trunkline_runner import DOOR_KEY, OPENAI_PROVIDER, Daemon
from .worker_path import cpu_ns

BODY = {"model": f"{OPENAI_PROVIDER}:bench-c1", "messages": [{"role": "user", "content": "hi"}]}


async def main(base: str, rounds: int, count: int, warmup: int) -> None:
    upstream = await LineProcess([sys.executable, "-m", "bench.upstream"], cwd=str(REPO)).start()
    port = int((await upstream.readline()).split()[1])
    daemons: dict[str, Daemon] = {}
    clients: dict[str, httpx.AsyncClient] = {}
    this = sys.executable
    try:
        for name, python in (("this", this), ("base", base)):
            # Daemon starts `sys.executable -m trunkline.cli serve`: the other checkout's
            # interpreter imports that checkout's trunkline.
            sys.executable = python
            try:
                daemons[name] = await Daemon(port, REPO / "bench" / "results" / f"door-{name}.log", http=True).start()
            finally:
                sys.executable = this
        auth = {"authorization": f"Bearer {DOOR_KEY}"}
        clients = {n: httpx.AsyncClient(base_url=d.http_url, headers=auth) for n, d in daemons.items()}
        pids = {n: [d.pid, *d.doors, d.workers[OPENAI_PROVIDER]] for n, d in daemons.items()}
        for client in clients.values():
            for _ in range(warmup):
                (await client.post("/v1/chat/completions", json=BODY)).raise_for_status()
        results: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in daemons}
        for r in range(rounds):
            for name in list(daemons) if r % 2 == 0 else list(reversed(daemons)):
                took = []
                before = sum(cpu_ns(p) for p in pids[name])
                for _ in range(count):
                    t0 = time.perf_counter()
                    (await clients[name].post("/v1/chat/completions", json=BODY)).raise_for_status()
                    took.append(time.perf_counter() - t0)
                cpu = (sum(cpu_ns(p) for p in pids[name]) - before) / count / 1e3
                p50 = statistics.median(took) * 1e6
                results[name][0].append(p50)
                results[name][1].append(cpu)
                print(f"round {r + 1} {name}: p50 {p50:6.0f} µs, door + supervisor + worker CPU {cpu:6.0f} µs/request")
        print(f"one request at a time through the door, median (min-max) of {rounds} rounds:")
        for name, (lat, cpu) in results.items():
            print(
                f"  {name}: p50 {statistics.median(lat):6.0f} µs ({min(lat):.0f}-{max(lat):.0f}), "
                f"CPU {statistics.median(cpu):6.0f} µs/request ({min(cpu):.0f}-{max(cpu):.0f})"
            )
    finally:
        for client in clients.values():
            await client.aclose()
        for daemon in daemons.values():
            await daemon.stop()
        await upstream.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the other checkout's interpreter (its own venv)")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--warmup", type=int, default=200)
    a = p.parse_args()
    trio.run(main, a.base, a.rounds, a.count, a.warmup)
