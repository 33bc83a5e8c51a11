"""One subscriber process of the many-subscribers measurement.

Each subscriber is its own client process with its own event subscription, and
PUB/SUB filters on the subscriber side: every subscriber's connection carries
every event of every client. This process connects, says `READY`, then runs
the streams it is told to and answers with what it received and what it cost.
It exits when its stdin closes.

    python -m bench.subscriber --runtime-dir DIR
    <- READY <pid>
    -> {"model": "fake:bench-c200", "concurrency": 4, "duration_s": 5}
    <- {"streams": ..., "events": ..., "lost": ..., "recovered": ..., "cpu_s": ..., "wall_s": ...}
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import trio

from trunkline import Client

from .load import closed_loop
from .procs import self_cpu
from .trunkline_runner import TrunklineOps


async def main(runtime_dir: str) -> None:
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    buf = b""
    async with Client(runtime_dir, client_name="bench-subscriber") as client:
        ops = TrunklineOps(client)
        print(f"READY {os.getpid()}", flush=True)
        while True:
            while b"\n" not in buf:
                chunk = await stdin.receive_some(65536)
                if not chunk:
                    return
                buf += chunk
            line, _, buf = buf.partition(b"\n")
            cmd = json.loads(line)
            model = cmd["model"]
            cpu0 = self_cpu()
            result = await closed_loop(
                lambda: ops.stream(model), cmd["concurrency"], count=10**9, duration_s=cmd["duration_s"]
            )
            cpu = self_cpu() - cpu0
            s = result.samples
            print(
                json.dumps(
                    {
                        "streams": len(s),
                        "deltas": sum(x[2] for x in s),
                        "events": sum(x[3] for x in s),
                        "lost": sum(x[4] for x in s),
                        "recovered": sum(x[5] for x in s),
                        "errors": result.errors,
                        "first_error": result.first_error,
                        "cpu_s": cpu,
                        "wall_s": result.wall_s,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runtime-dir", required=True)
    trio.run(main, parser.parse_args().runtime_dir)
