"""Where the CPU of one request goes, process by process: a quick loop for working on
the daemon's own cost, outside the full benchmark.

    .venv/bin/python -m bench.cpu_split [--count 3000] [--load complete|stream] [--model fake:gpt-4o-mini]
                                        [--worker-start forkserver|spawn]
    .venv/bin/python -m bench.cpu_split --skeleton [--count 3000]

Prints CPU µs per operation for the client, the supervisor and each worker, each
split into its main thread (system time apart) and its other threads (nng's).
`--skeleton`: the same for the skeleton (bench/skeleton.py: trunkline's processes
and transports doing nothing), one non-streamed request at a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import trio

from trunkline import Client

from .load import closed_loop
from .procs import LineProcess, cpu_seconds
from .run import REPO
from .skeleton import Skeleton
from .trunkline_runner import Daemon, TrunklineOps


def thread_cpu(pid: int) -> dict[int, float]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as stat:
            raw = stat.read()
        f = raw[raw.rindex(")") + 2 :].split()
        out[int(tid)] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        out[-int(tid)] = int(f[12]) / os.sysconf("SC_CLK_TCK")
    return out


async def main(
    count: int,
    load: str,
    model: str,
    concurrency: int,
    warmup_concurrency: int,
    skeleton: bool,
    worker_start: str | None = None,
) -> None:
    upstream = await LineProcess([sys.executable, "-m", "bench.upstream"], cwd=str(REPO)).start()
    port = int((await upstream.readline()).split()[1])
    try:
        if skeleton:
            async with trio.open_nursery() as nursery:
                skel = await Skeleton(port, REPO / "bench" / "results" / "cpu_split.log").start(nursery)
                try:
                    pids = {"client": os.getpid(), "supervisor": skel.supervisor_pid, "worker": skel.worker_pid}
                    await measure(lambda: skel.complete("bench-c1"), pids, count, "skeleton", "bench-c1", 1, 0)
                finally:
                    await skel.stop()
                nursery.cancel_scope.cancel()
            return
        extra = {"supervision": {"worker_start": worker_start}} if worker_start else {}
        daemon = await Daemon(port, REPO / "bench" / "results" / "cpu_split.log", extra=extra).start()
        try:
            async with Client(daemon.runtime_dir, client_name="bench-cpu") as client:
                ops = TrunklineOps(client)
                op = (lambda: ops.stream(model)) if load == "stream" else (lambda: ops.complete(model))
                pids = {"client": os.getpid(), "supervisor": daemon.pid}
                pids.update({f"worker {k}": v for k, v in daemon.workers.items()})
                await measure(op, pids, count, load, model, concurrency, warmup_concurrency)
        finally:
            await daemon.stop()
    finally:
        await upstream.stop()


async def measure(
    op: Any, pids: dict[str, int], count: int, load: str, model: str, concurrency: int, warmup_concurrency: int
) -> None:
    # Warming up at a higher concurrency leaves that many idle connections in the
    # worker's pool, as a burst of traffic does.
    await closed_loop(op, warmup_concurrency or concurrency, count=max(300, 2 * warmup_concurrency), duration_s=20)
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    threads_before = {k: thread_cpu(p) for k, p in pids.items()}
    t0 = time.perf_counter()
    result = await closed_loop(op, concurrency, count=count, duration_s=120)
    wall = time.perf_counter() - t0
    after = {k: cpu_seconds(p) for k, p in pids.items()}
    threads_after = {k: thread_cpu(p) for k, p in pids.items()}
    done = len(result.samples)
    lat = sorted(s if isinstance(s, float) else s[1] for s in result.samples)
    print(
        f"{load} {model} c={concurrency}: {done} ops, {result.errors} errors, {done / wall:.0f}/s, "
        f"p50 {lat[len(lat) // 2] * 1e3:.2f} ms"
    )
    total = 0.0
    for k in pids:
        us = (after[k] - before[k]) / max(done, 1) * 1e6
        total += us
        if us > 5:
            main_us = (threads_after[k].get(pids[k], 0) - threads_before[k].get(pids[k], 0)) / max(done, 1) * 1e6
            main_sys = (threads_after[k].get(-pids[k], 0) - threads_before[k].get(-pids[k], 0)) / max(done, 1) * 1e6
            print(
                f"  {k:16s} {us:8.0f} µs/op  (main thread {main_us:.0f} of which system {main_sys:.0f}, "
                f"other threads {us - main_us:.0f})"
            )
    print(f"  {'total':16s} {total:8.0f} µs/op")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--count", type=int, default=3000)
    p.add_argument("--load", choices=["complete", "stream"], default="complete")
    p.add_argument("--model", default="fake:gpt-4o-mini")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--warmup-concurrency", type=int, default=0)
    p.add_argument("--skeleton", action="store_true", help="the skeleton instead of trunkline")
    p.add_argument(
        "--worker-start", choices=["forkserver", "spawn"], help="supervision.worker_start (default: the config's)"
    )
    a = p.parse_args()
    trio.run(main, a.count, a.load, a.model, a.concurrency, a.warmup_concurrency, a.skeleton, a.worker_start)
