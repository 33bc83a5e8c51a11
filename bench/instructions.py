"""Instructions per request, each of trunkline's processes beside the skeleton's: counted
with valgrind's callgrind, not timed, so a change to a hop's own work shows even on a
machine whose timings move by more than the change.

    .venv/bin/python -m bench.instructions [--count 200] [--rounds 2]

One small whole-response request at a time (`fake:bench-c1`, the skeleton stage's
request), against the benchmark's fake upstream. For each process the one under count
runs under callgrind; the others run as usual. Its counters are zeroed after a warm-up,
`count` requests go through, and the count is read from its dump:

* worker: `bench.worker_path`'s worker (this process in the supervisor's place) beside
  the skeleton's worker, driven over its socket pair the same way;
* supervisor: a daemon started as the benchmark starts it, beside the skeleton's
  supervisor (each one's worker runs as usual, outside valgrind);
* client: a process making the requests through `trunkline.Client`, beside one making
  them through the skeleton's client (`bench.skeleton.Skeleton`).

Instructions are user-space work of every thread of the process (nng's too); the
kernel's work is not counted, nor is what a cold cache costs: a process that runs
between two hops of a request pays more per instruction than one run back to back.
Needs `valgrind` on the PATH. Takes a few minutes: a process under callgrind runs about
fifty times slower.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import trio

from trunkline import Client
from trunkline.config.catalog import Catalog
from trunkline.config.loader import ProviderConfig

from .procs import LineProcess
from .run import REPO
from .skeleton import Skeleton
from .skeleton_wire import Link
from .trunkline_runner import Daemon, TrunklineOps
from .worker_path import PROVIDER, Worker, measure

MODEL = "bench-c1"
WARMUP = 100


class Callgrind:
    """An interpreter under callgrind (a wrapper script that execs it so), and the
    counters of the processes it runs."""

    def __init__(self, work: Path) -> None:
        self.out = work / "cg"
        self.out.mkdir()
        self.python = str(work / "python-under-callgrind")
        Path(self.python).write_text(
            "#!/bin/sh\n"
            f"exec valgrind --tool=callgrind --callgrind-out-file={self.out}/cg.%p.out "
            f'--dump-instr=no --collect-jumps=no {sys.executable} "$@"\n'
        )
        os.chmod(self.python, 0o755)

    def zero(self, pid: int) -> None:
        subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True, check=False)

    def dump(self, pid: int) -> int:
        """Dump `pid`'s counters; the instructions counted since the last zero."""
        before = set(self.out.glob(f"cg.{pid}.out.*"))
        subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True)
        (new,) = set(self.out.glob(f"cg.{pid}.out.*")) - before
        found = re.search(rb"^(?:summary|totals): (\d+)", new.read_bytes(), re.M)
        if found is None:
            raise RuntimeError(f"no instruction count in {new}")
        return int(found.group(1))

    async def per_request(self, pid: int, requests: Callable[[], Awaitable[None]], count: int) -> float:
        self.zero(pid)
        await requests()
        return self.dump(pid) / count


# -- the worker ------------------------------------------------------------------------


async def workers(cg: Callgrind, port: int, state: Path, count: int, rounds: int) -> dict[str, list[float]]:
    providers = {PROVIDER: ProviderConfig(type="openai_compat", base_url=f"http://127.0.0.1:{port}/v1")}
    catalog = Catalog.load(providers=providers, configured=[PROVIDER], types={PROVIDER: "openai_compat"})
    model = f"{PROVIDER}:{MODEL}"
    ours, theirs = socket.socketpair()
    skeleton = subprocess.Popen(
        [cg.python, "-m", "bench.skeleton_worker", f"fd:{theirs.fileno()}", f"http://127.0.0.1:{port}/v1"],
        pass_fds=(theirs.fileno(),),
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
    )
    theirs.close()
    link = Link(ours)
    encode = msgspec.msgpack.Encoder().encode
    out: dict[str, list[float]] = {"trunkline": [], "skeleton": []}
    try:
        with trio.fail_after(300):
            await link.receive()  # its hello

        async def skeleton_jobs(n: int) -> None:
            for i in range(n):
                await link.send(encode({"id": f"r{i}", "model": MODEL, "messages": [], "trace": False}))
                await link.receive()

        async with trio.open_nursery() as nursery:
            worker = Worker(cg.python, port, state)
            await worker.start(nursery)
            assert worker.proc is not None
            await measure(worker, catalog, model, False, WARMUP, 1)
            await skeleton_jobs(WARMUP)

            async def trunkline_jobs() -> None:
                await measure(worker, catalog, model, False, count, 1)

            for _ in range(rounds):
                out["trunkline"].append(await cg.per_request(worker.proc.pid, trunkline_jobs, count))
                out["skeleton"].append(await cg.per_request(skeleton.pid, lambda: skeleton_jobs(count), count))
            nursery.cancel_scope.cancel()
        worker.stop()
    finally:
        ours.close()
        try:
            skeleton.wait(30)
        except subprocess.TimeoutExpired:
            skeleton.kill()
    return out


# -- the supervisor --------------------------------------------------------------------


async def supervisors(cg: Callgrind, port: int, work: Path, count: int, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"trunkline": [], "skeleton": []}
    daemon = await Daemon(port, work / "daemon.log", python=cg.python).start(timeout_s=300)
    try:
        async with Client(daemon.runtime_dir) as client:
            ops = TrunklineOps(client)
            name = f"{PROVIDER}:{MODEL}"

            async def trunkline_requests(n: int) -> None:
                for _ in range(n):
                    await ops.complete(name)

            await trunkline_requests(WARMUP)
            for _ in range(rounds):
                out["trunkline"].append(await cg.per_request(daemon.pid, lambda: trunkline_requests(count), count))
    finally:
        await daemon.stop()
    async with trio.open_nursery() as nursery:
        skeleton = await Skeleton(port, work / "skeleton.log", python=cg.python).start(nursery)

        async def skeleton_requests(n: int) -> None:
            for _ in range(n):
                await skeleton.complete(MODEL)

        await skeleton_requests(WARMUP)
        for _ in range(rounds):
            pid = skeleton.supervisor_pid
            out["skeleton"].append(await cg.per_request(pid, lambda: skeleton_requests(count), count))
        await skeleton.stop()
        nursery.cancel_scope.cancel()
    return out


# -- the client ------------------------------------------------------------------------


async def _client_probe(system: str, where: str, count: int, rounds: int) -> None:
    """In the process under count: warm up, then for each round say `ZERO`, wait for a
    line, make `count` requests, say `DUMP`, wait for a line."""

    async def rounds_of(request: Callable[[], Awaitable[object]]) -> None:
        stdin = trio.wrap_file(sys.stdin)
        for _ in range(WARMUP):
            await request()
        for _ in range(rounds):
            print("ZERO", flush=True)
            await stdin.readline()
            for _ in range(count):
                await request()
            print("DUMP", flush=True)
            await stdin.readline()

    if system == "trunkline":
        async with Client(where) as client:
            ops = TrunklineOps(client)
            await rounds_of(lambda: ops.complete(f"{PROVIDER}:{MODEL}"))
        return
    async with trio.open_nursery() as nursery:
        skeleton = await Skeleton(int(where), Path(tempfile.gettempdir()) / "tl-instructions-skeleton.log").start(
            nursery
        )
        await rounds_of(lambda: skeleton.complete(MODEL))
        await skeleton.stop()
        nursery.cancel_scope.cancel()


def _count_client(cg: Callgrind, system: str, where: str, count: int, rounds: int) -> list[float]:
    argv = [cg.python, "-m", "bench.instructions", "--client-probe", system, where]
    argv += ["--count", str(count), "--rounds", str(rounds)]
    proc = subprocess.Popen(argv, cwd=str(REPO), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    assert proc.stdout is not None
    out: list[float] = []
    try:
        for line in proc.stdout:
            if line.startswith("ZERO"):
                cg.zero(proc.pid)
            elif line.startswith("DUMP"):
                out.append(cg.dump(proc.pid) / count)
            else:
                continue
            proc.stdin.write("\n")
            proc.stdin.flush()
    finally:
        proc.stdin.close()
        proc.wait(60)
    if proc.returncode or len(out) != rounds:
        raise RuntimeError(f"the {system} client under count exited with {proc.returncode}")
    return out


async def clients(cg: Callgrind, port: int, work: Path, count: int, rounds: int) -> dict[str, list[float]]:
    daemon = await Daemon(port, work / "daemon-for-client.log").start()
    try:
        trunkline = await trio.to_thread.run_sync(
            _count_client, cg, "trunkline", str(daemon.runtime_dir), count, rounds
        )
    finally:
        await daemon.stop()
    skeleton = await trio.to_thread.run_sync(_count_client, cg, "skeleton", str(port), count, rounds)
    return {"trunkline": trunkline, "skeleton": skeleton}


# -- the report ------------------------------------------------------------------------


async def main(count: int, rounds: int) -> None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("bench.instructions needs valgrind (with callgrind_control) on the PATH")
    upstream = await LineProcess([sys.executable, "-m", "bench.upstream"], cwd=str(REPO)).start()
    port = int((await upstream.readline()).split()[1])
    results: dict[str, dict[str, list[float]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="tl-instr-", dir="/tmp") as tmp:
            work = Path(tmp)
            cg = Callgrind(work)
            state = work / "state"
            state.mkdir()
            print("bench: worker ...", file=sys.stderr, flush=True)
            results["worker"] = await workers(cg, port, state, count, rounds)
            print("bench: supervisor ...", file=sys.stderr, flush=True)
            results["supervisor"] = await supervisors(cg, port, work, count, rounds)
            print("bench: client ...", file=sys.stderr, flush=True)
            results["client"] = await clients(cg, port, work, count, rounds)
    finally:
        await upstream.stop()
    print(f"Instructions per request ({count} requests a round, {rounds} rounds: each round's count, thousands)")
    print()
    print("| process | trunkline | skeleton | trunkline - skeleton |")
    print("|---|---|---|---|")
    total = 0.0
    for process, counts in results.items():
        ours, theirs = counts["trunkline"], counts["skeleton"]
        extra = min(ours) - min(theirs)
        total += extra
        print(
            f"| {process} | {', '.join(f'{x / 1e3:.0f}' for x in ours)} | "
            f"{', '.join(f'{x / 1e3:.0f}' for x in theirs)} | {extra / 1e3:+.0f} |"
        )
    print(f"| all three | | | {total / 1e3:+.0f} |")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=200, help="requests per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--client-probe", nargs=2, metavar=("SYSTEM", "WHERE"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.client_probe:
        trio.run(_client_probe, a.client_probe[0], a.client_probe[1], a.count, a.rounds)
    else:
        trio.run(main, a.count, a.rounds)
