"""Where trunkline's CPU goes, by function: py-spy samples the supervisor, the worker and
the client from outside while the benchmark's load runs. Optional, not part of
`make bench`; needs py-spy in bench/.venv (`bench/.venv/bin/pip install py-spy`).

    .venv/bin/python -m bench.profile [--seconds 8] [--load complete|stream] [--door] [--out DIR]

With `--door` the load goes through the HTTP front door (the benchmark's httpx
client, as in its HTTP stage) and the door process is sampled too.

Writes one collapsed-stack file per process (for flame graph tools) and prints
each process's functions with the most samples, inclusive and self. Sampling
with `--nonblocking` does not pause the processes, so it disturbs them little.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

import trio

from trunkline import Client

from .floor import HttpTarget
from .load import Op, closed_loop
from .peers import BENCH_VENV
from .procs import LineProcess
from .run import REPO
from .trunkline_runner import DOOR_KEY, OPENAI_PROVIDER, Daemon, TrunklineOps


def top(collapsed: Path, n: int = 18) -> str:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = stack.split(";")
        for frame in set(frames):
            inclusive[frame] += c
        own[frames[-1]] += c
    if not total:
        return "  (no samples)"
    lines = [f"  {total} samples; inclusive:"]
    lines += [f"    {v / total * 100:5.1f}%  {k}" for k, v in inclusive.most_common(n)]
    lines.append("  self:")
    lines += [f"    {v / total * 100:5.1f}%  {k}" for k, v in own.most_common(n)]
    return "\n".join(lines)


def door_op(target: HttpTarget, load: str) -> tuple[Op, int]:
    """The HTTP stage's load through the front door: streams of 50 chunks, or requests at
    concurrency 64."""
    if load == "stream":
        return (lambda: target.stream(f"{OPENAI_PROVIDER}:bench-c50")), 16
    return (lambda: target.complete(f"{OPENAI_PROVIDER}:bench-c1")), 64


async def main(seconds: float, load: str, out: Path, door: bool = False, concurrency_override: int = 0) -> None:
    spy = BENCH_VENV / "bin" / "py-spy"
    if not spy.exists():
        sys.exit("py-spy is not in bench/.venv: bench/.venv/bin/pip install py-spy")
    out.mkdir(parents=True, exist_ok=True)
    upstream = await LineProcess([sys.executable, "-m", "bench.upstream"], cwd=str(REPO)).start()
    port = int((await upstream.readline()).split()[1])
    daemon = await Daemon(port, out / "daemon.log", http=door).start()
    target = HttpTarget(daemon.http_url + "/v1", {"authorization": f"Bearer {DOOR_KEY}"}) if door else None
    try:
        async with Client(daemon.runtime_dir, client_name="bench-profile") as client:
            ops = TrunklineOps(client)
            op: Op
            if target is not None:
                op, concurrency = door_op(target, load)
            elif load == "stream":
                model, concurrency = f"{OPENAI_PROVIDER}:bench-c200", 64
                op = lambda: ops.stream(model)  # noqa: E731 - one of two ops chosen here
            else:
                model, concurrency = f"{OPENAI_PROVIDER}:gpt-4o-mini", 16
                op = lambda: ops.complete(model)  # noqa: E731 - one of two ops chosen here
            if concurrency_override:
                concurrency = concurrency_override
            await closed_loop(op, concurrency, count=200, duration_s=5)  # warm up
            targets = {"supervisor": daemon.pid, "worker": daemon.workers[OPENAI_PROVIDER], "client": os.getpid()}
            if door:
                targets["door"] = daemon.doors[0]
            name_prefix = f"door-{load}" if door else load
            spies = []
            for name, pid in targets.items():
                spies.append(
                    await trio.lowlevel.open_process(
                        [
                            str(spy),
                            "record",
                            "--pid",
                            str(pid),
                            "--duration",
                            str(int(seconds)),
                            "--rate",
                            "250",
                            "--nonblocking",
                            "--threads",
                            "--format",
                            "raw",
                            "--output",
                            str(out / f"{name_prefix}-{name}.txt"),
                        ],
                        stdout=open(os.devnull, "wb"),  # noqa: SIM115 - the child holds its own copy
                        stderr=open(out / f"{name_prefix}-{name}.spy.log", "wb"),  # noqa: SIM115 - the child's copy
                    )
                )
            result = await closed_loop(op, concurrency, count=10**9, duration_s=seconds + 1)
            for proc in spies:
                await proc.wait()
            print(f"{name_prefix}: {len(result.samples)} operations in {result.wall_s:.1f} s, {result.errors} errors")
            for name in targets:
                path = out / f"{name_prefix}-{name}.txt"
                print(f"\n{name} (pid {targets[name]}):")
                print(top(path) if path.exists() else "  py-spy wrote nothing; see its log")
    finally:
        if target is not None:
            await target.aclose()
        await daemon.stop()
        await upstream.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--load", choices=["complete", "stream"], default="stream")
    p.add_argument("--concurrency", type=int, default=0, help="requests in flight (default: 64 streaming, 16 complete)")
    p.add_argument("--door", action="store_true", help="the load through the HTTP front door; the door sampled too")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "profile")
    a = p.parse_args()
    trio.run(main, a.seconds, a.load, a.out, a.door, a.concurrency)
