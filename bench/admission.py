"""What admission adds to a request: the memory store in this process, and the Redis
store against a real redis-server started for the run.

    .venv/bin/python -m bench.admission [--requests 5000] [--redis-server /usr/bin/redis-server]

For each store: `admit` (on the submit path) and `settle` (after the reply) of one
request with a key limit (rpm, tpm, parallel, a daily budget) and two candidate
deployments with limits of their own, one request at a time. Redis: round trips per
request on the submit path (the client counts its writes), p50 and p99 of `admit`,
of `settle` one by one and of settlements batched as the shared store's flusher sends
them, each beside a plain PING round trip measured in the same run. The issue's
targets: memory at most 20 µs per request; Redis at most one round trip per request
at p50.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import time

import trio

from trunkline.supervisor.admission.memory import MemoryStore
from trunkline.supervisor.admission.redis_client import RedisClient
from trunkline.supervisor.admission.redis_store import RedisStore
from trunkline.supervisor.admission.store import Candidate, Limits, Settlement, Ticket

from .stats import percentile

KEY_LIMITS = Limits(rpm=10**9, tpm=10**12, parallel=10**6, usd_per_day=10**9)
CANDIDATES = (Candidate("primary", Limits(rpm=10**9, tpm=10**12)), Candidate("backup", Limits(rpm=10**9)))


def ticket(i: int, now: float) -> Ticket:
    return Ticket(f"bench-{i}", "bench-key", KEY_LIMITS, CANDIDATES, 500, now)


def settlement(i: int, now: float) -> Settlement:
    return Settlement(f"bench-{i}", "bench-key", "primary", 500, 480, 0.0001, now)


def us(values: list[float], q: float) -> str:
    return f"{percentile(sorted(values), q) * 1e6:8.1f} µs"


def bench_memory(n: int) -> None:
    store = MemoryStore()
    admit, settle = [], []
    now = time.time()
    for i in range(n):
        t0 = time.perf_counter()
        store.admit_now(ticket(i, now))
        t1 = time.perf_counter()
        store.settle_now(settlement(i, now))
        t2 = time.perf_counter()
        admit.append(t1 - t0)
        settle.append(t2 - t1)
    both = [a + s for a, s in zip(admit, settle, strict=True)]
    print(f"memory   admit p50 {us(admit, 50)}  p99 {us(admit, 99)}")
    print(f"memory   settle p50 {us(settle, 50)}  p99 {us(settle, 99)}")
    print(f"memory   admit+settle p50 {us(both, 50)}  (target: at most 20 µs)")


async def bench_redis(n: int, server_path: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [server_path, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with trio.open_nursery() as nursery:
            client = RedisClient(f"redis://127.0.0.1:{port}/0", timeout_s=5.0)
            await nursery.start(client.run)
            with trio.fail_after(20):  # the server may take a moment to listen
                while not client.is_connected:
                    client.retry_now()
                    with trio.move_on_after(0.2):
                        await client.connected.wait()
            store = RedisStore(client, daemon="bench")
            now = time.time()
            await store.admit(ticket(-1, now))  # the scripts loaded (EVAL once), as in a running daemon
            await store.settle(settlement(-1, now))
            ping, admit, settle = [], [], []
            for _ in range(n):
                t0 = time.perf_counter()
                await client.call("PING")
                ping.append(time.perf_counter() - t0)
            before = client.round_trips
            for i in range(n):
                t0 = time.perf_counter()
                await store.admit(ticket(i, now))
                admit.append(time.perf_counter() - t0)
            per_admit = (client.round_trips - before) / n
            for i in range(n):
                t0 = time.perf_counter()
                await store.settle(settlement(i, now))
                settle.append(time.perf_counter() - t0)
            for i in range(n):  # settled again: batched as the flusher sends them
                await store.admit(ticket(n + i, now))
            batch = 64
            before = client.round_trips
            t0 = time.perf_counter()
            for start in range(0, n, batch):
                await store.settle_many([(settlement(n + i, now), False) for i in range(start, min(start + batch, n))])
            batched = (time.perf_counter() - t0) / n
            per_settle_batched = (client.round_trips - before) / n
            p50_ping = percentile(sorted(ping), 50)
            p50_admit = percentile(sorted(admit), 50)
            print(f"redis    PING p50 {us(ping, 50)}  p99 {us(ping, 99)}")
            print(
                f"redis    admit p50 {us(admit, 50)}  p99 {us(admit, 99)}  = {p50_admit / p50_ping:.2f} PING round trips; "
                f"{per_admit:.2f} round trips per request on the submit path (target: at most 1)"
            )
            print(f"redis    settle one by one p50 {us(settle, 50)}  p99 {us(settle, 99)}")
            print(
                f"redis    settle batched by {batch}: {batched * 1e6:.1f} µs and {per_settle_batched:.3f} round trips "
                "per request, after the reply"
            )
            nursery.cancel_scope.cancel()
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "/usr/bin/redis-server")
    args = parser.parse_args()
    bench_memory(args.requests)
    trio.run(bench_redis, args.requests, args.redis_server)


if __name__ == "__main__":
    main()
