"""One benchmark run: start the fake upstream, trunkline and the peers, measure every
table of the report against the same upstream, write the report.

Each stage is independent: one that fails is recorded in the report (and makes
the run exit non-zero) while the others still run. A peer that cannot start is
not a failure: it is skipped, with the reason in the report.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import trio

from trunkline import Client
from trunkline.protocol.messages import TextDelta

from . import hops, report, warm_start
from .floor import HttpTarget
from .load import LoadResult, Totals, closed_loop
from .peers import PeerUnavailable, Portkey, Proxy, start_portkey, start_proxy, start_sdk
from .procs import CpuMeter, LineProcess, pss_mb, rss_mb, self_cpu
from .skeleton import Skeleton
from .stats import Summary, slope_per_minute
from .trunkline_runner import ANTHROPIC_PROVIDER, DOOR_KEY, OPENAI_PROVIDER, Daemon, TrunklineOps

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Plan:
    """How much of everything: `full()` for `make bench`, `quick()` for a seconds-long check."""

    mode: str
    repeats: int
    concurrencies: tuple[int, ...]
    cell_s: float  # each latency cell runs this long (or `cell_count` requests)
    cell_count: int
    warmup: int
    stream_chunks: int
    stream_s: float
    stream_count: int
    events_concurrency: int
    events_chunks: int
    events_s: float
    subscribers: tuple[int, ...]
    subscriber_streams_in_flight: int
    subscriber_s: float
    open_streams: int
    hop_samples: int
    #: Worker kills per daemon in the warm-start stage.
    warm_kills: int
    capacity_s: float
    soak_minutes: float
    settle_s: float
    #: The skeleton stage splits each system's `cell_s` into this many turns, the floor, the
    #: skeleton and trunkline alternating, so that the machine's other work falls on all alike.
    skeleton_turns: int = 6

    @classmethod
    def full(cls, soak_minutes: float = 10.0) -> Plan:
        return cls(
            "full",
            repeats=3,
            concurrencies=(1, 16, 64, 256),
            cell_s=3.0,
            cell_count=50_000,
            warmup=20,
            stream_chunks=50,
            stream_s=3.0,
            stream_count=5_000,
            events_concurrency=64,
            events_chunks=200,
            events_s=5.0,
            subscribers=(1, 8, 32),
            subscriber_streams_in_flight=32,
            subscriber_s=5.0,
            open_streams=1000,
            hop_samples=300,
            warm_kills=10,
            capacity_s=2.0,
            soak_minutes=soak_minutes,
            settle_s=2.0,
        )

    @classmethod
    def quick(cls, soak_minutes: float = 5 / 60) -> Plan:
        return cls(
            "quick",
            repeats=1,
            concurrencies=(1, 16, 64, 256),
            cell_s=0.25,
            cell_count=60,
            warmup=2,
            stream_chunks=50,
            stream_s=0.25,
            stream_count=5,
            events_concurrency=8,
            events_chunks=50,
            events_s=0.3,
            subscribers=(1, 2),
            subscriber_streams_in_flight=4,
            subscriber_s=0.3,
            open_streams=50,
            hop_samples=10,
            warm_kills=2,
            capacity_s=0.3,
            soak_minutes=soak_minutes,
            settle_s=0.2,
            skeleton_turns=2,
        )


SYSTEMS = ("floor", "trunkline", "sdk", "proxy", "portkey")
#: The HTTP stage: one httpx client (the floor's) against the upstream, trunkline's front door
#: and the two HTTP peers.
HTTP_SYSTEMS = ("floor", "door", "proxy", "portkey")
#: Its cells: (kind, concurrency), each run by every system in turn.
HTTP_CELLS = (("complete", 1), ("stream", 1), ("complete", 64))
#: The SDK on its Rust path (LiteLLM's `rust_bridge`), measured on Anthropic's Messages API only: the
#: only route LiteLLM 1.110 serves from Rust.
SDK_SYSTEMS = ("sdk", "sdk_rust")


class _Fatal(Exception):
    """A stage everything else needs has failed."""


class Bench:
    def __init__(self, plan: Plan, out: Path, peers: bool, only: frozenset[str] = frozenset()) -> None:
        self.plan = plan
        #: The stages to run (empty: all); see STAGES.
        self.only = only
        self.out = out
        self.want_peers = peers
        self.logs = out.parent
        self.logs.mkdir(parents=True, exist_ok=True)
        self.results: dict[str, Any] = {
            "mode": plan.mode,
            "plan": asdict(plan),
            "failures": [],
            "peers": {},
            "latency": {},
            "streams": {},
            "anthropic": {},
            "events": [],
            "subscribers": {},
            "memory": {},
            "soak": {},
            "hops": {},
            "http": {},
            "door": {},
            "skeleton": {},
            "warm_start": {},
        }
        self.upstream: LineProcess | None = None
        self.port = 0
        self.daemon: Daemon | None = None
        self.client: Client | None = None
        self.ops: TrunklineOps | None = None
        self.floor: HttpTarget | None = None
        self.sdk: LineProcess | None = None
        self.proxy: Proxy | None = None
        self.proxy_target: HttpTarget | None = None
        self.portkey: Portkey | None = None
        self.portkey_targets: dict[str, HttpTarget] = {}
        #: The HTTP stage's daemon (its front door on) and the floor's client pointed at the door.
        self.door: Daemon | None = None
        self.door_target: HttpTarget | None = None
        #: The skeleton (bench/skeleton.py): runs through the repeats of the skeleton stage, and
        #: again during the hop trace; never beside the other stages' measurements.
        self.skeleton: Skeleton | None = None
        self._nursery: trio.Nursery | None = None

    # -- bookkeeping -----------------------------------------------------------------------

    @asynccontextmanager
    async def stage(self, name: str) -> AsyncIterator[None]:
        t0 = time.perf_counter()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - one broken stage must not hide the others
            self.results["failures"].append(
                {"stage": name, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
            )
            print(f"bench: {name} FAILED: {exc!r}", file=sys.stderr, flush=True)
        finally:
            self.results.setdefault("stage_s", {})[name] = time.perf_counter() - t0

    def systems(self) -> list[str]:
        return [
            s
            for s in SYSTEMS
            if s in ("floor", "trunkline")
            or (s == "sdk" and self.sdk)
            or (s == "proxy" and self.proxy)
            or (s == "portkey" and self.portkey)
        ]

    def trunkline_groups(self) -> dict[str, list[int]]:
        assert self.daemon is not None
        groups = {"supervisor": [self.daemon.pid], "upstream": [self.upstream.pid] if self.upstream else []}
        for name, pid in self.daemon.workers.items():
            groups[f"worker {name}"] = [pid]
        return groups

    def groups_for(self, system: str) -> dict[str, list[int]]:
        upstream = {"upstream": [self.upstream.pid]} if self.upstream else {}
        if system == "trunkline":
            return self.trunkline_groups()
        if system == "proxy" and self.proxy:
            return {"proxy": self.proxy.pids(), **upstream}
        if system in SDK_SYSTEMS and self.sdk:
            return {"sdk": [self.sdk.pid], **upstream}
        if system == "portkey" and self.portkey:
            return {"portkey": self.portkey.pids(), **upstream}
        if system == "skeleton" and self.skeleton:
            return {**self.skeleton.groups(), **upstream}
        if system == "door" and self.door:
            groups = {"front door": self.door.doors, "supervisor": [self.door.pid], **upstream}
            for name, pid in self.door.workers.items():
                groups[f"worker {name}"] = [pid]
            return groups
        return upstream

    # -- setup -------------------------------------------------------------------------------

    async def start_upstream(self) -> None:
        self.upstream = LineProcess(
            [sys.executable, "-m", "bench.upstream"], cwd=str(REPO), log=self.logs / "upstream.log"
        )
        await self.upstream.start()
        self.port = int((await self.upstream.readline(30)).split()[1])
        self.floor = HttpTarget(f"http://127.0.0.1:{self.port}/v1")

    async def start_trunkline(self, nursery: trio.Nursery) -> None:
        self.daemon = Daemon(self.port, self.logs / "daemon.log")
        await self.daemon.start()

    async def start_peers(self) -> None:
        peers = self.results["peers"]
        if not self.want_peers:
            for name in ("sdk", "proxy", "portkey"):
                peers[name] = {"status": "skipped", "reason": "peers disabled (--no-peers)"}
            return
        # A peer that fails to start in any way is skipped with the reason; the run goes on.
        try:
            self.sdk, hello = await start_sdk(self.logs / "litellm-sdk.log")
            peers["sdk"] = {"status": "ok", "version": hello["version"], "rss_idle_mb": hello["rss_mb"]}
        except (PeerUnavailable, OSError) as exc:
            peers["sdk"] = {"status": "skipped", "reason": str(exc)}
        try:
            workdir = Path(self.daemon.dir if self.daemon else "/tmp")
            self.proxy = await start_proxy(self.port, workdir, self.logs / "litellm-proxy.log")
            await trio.sleep(self.plan.settle_s)
            peers["proxy"] = {"status": "ok", "version": self.proxy.version, "rss_idle_mb": self.proxy.rss()}
            self.proxy_target = HttpTarget(self.proxy.base_url, {"authorization": "Bearer sk-bench"})
        except (PeerUnavailable, OSError) as exc:
            peers["proxy"] = {"status": "skipped", "reason": str(exc)}
        try:
            self.portkey = await start_portkey(self.port, self.logs / "portkey.log")
            await trio.sleep(self.plan.settle_s)
            peers["portkey"] = {"status": "ok", "version": self.portkey.version, "rss_idle_mb": self.portkey.rss()}
            self.portkey_targets = {
                api: HttpTarget(self.portkey.base_url, self.portkey.headers(api)) for api in ("openai", "anthropic")
            }
        except (PeerUnavailable, OSError) as exc:
            peers["portkey"] = {"status": "skipped", "reason": str(exc)}

    # -- one measurement cell ------------------------------------------------------------------

    async def cell(
        self,
        system: str,
        kind: str,
        model: str,
        concurrency: int,
        *,
        duration_s: float,
        count: int,
        warmup: int,
        api: str = "openai",
    ) -> dict[str, Any]:
        """Run one system at one concurrency; return its latency summary and CPU."""
        meter = CpuMeter(self.groups_for(system), include_self=system not in SDK_SYSTEMS).start()
        wall0 = time.perf_counter()
        served_by_rust = None  # what the SDK driver says its Rust path served
        if system in SDK_SYSTEMS:
            assert self.sdk is not None
            if api == "anthropic":
                route = {
                    "op": f"messages_{kind}",
                    "model": f"anthropic/{model}",
                    "api_base": f"http://127.0.0.1:{self.port}",
                    "rust": system == "sdk_rust",
                }
            else:
                route = {"op": kind, "model": f"openai/{model}", "api_base": f"http://127.0.0.1:{self.port}/v1"}
            reply = await self.sdk.call(
                {**route, "concurrency": concurrency, "count": count, "duration_s": duration_s, "warmup": warmup}
            )
            result = LoadResult(reply["samples"], reply["wall_s"], reply["errors"], reply["first_error"])
            cpu = meter.stop()
            cpu["sdk"] = reply["cpu_s"]  # the driver's own figure excludes its warm-up
            self.results["peers"]["sdk"]["rss_after_mb"] = max(
                self.results["peers"]["sdk"].get("rss_after_mb", 0), reply["rss_mb"]
            )
            served_by_rust = reply.get("served_by_rust")
        else:
            op = self._op(system, kind, model, api)
            await closed_loop(op, min(concurrency, max(warmup, 1)), count=warmup, duration_s=duration_s)
            meter.start()  # CPU of the timed part only
            result = await closed_loop(op, concurrency, count=count, duration_s=duration_s)
            cpu = meter.stop()
        cell_wall = time.perf_counter() - wall0
        out: dict[str, Any] = {
            "errors": result.errors,
            "first_error": result.first_error,
            "wall_s": result.wall_s,
            "cpu": cpu,
            "cell_wall_s": cell_wall,
        }
        if served_by_rust is not None and system == "sdk_rust":
            out["served_by_rust"] = served_by_rust
        samples = result.samples
        if kind == "complete":
            out.update(asdict(Summary.of(samples, result.wall_s)))
        else:
            ttft = Summary.of([s[0] for s in samples], result.wall_s)
            ttlt = Summary.of([s[1] for s in samples], result.wall_s)
            out.update(
                n=ttlt.n,
                rate=ttlt.rate,
                ttft_p50=ttft.p50,
                ttft_p99=ttft.p99,
                ttlt_p50=ttlt.p50,
                ttlt_p99=ttlt.p99,
                chunks=sum(s[2] for s in samples),
            )
            if system == "trunkline":
                out.update(
                    events=sum(s[3] for s in samples),
                    lost=sum(s[4] for s in samples),
                    recovered=sum(s[5] for s in samples),
                )
        out["cpu_system_s"] = self._system_cpu(system, cpu)
        return out

    @staticmethod
    def _system_cpu(system: str, cpu: dict[str, float]) -> float:
        """CPU of everything the system needs to make its calls, the client included,
        the upstream excluded."""
        return sum(v for k, v in cpu.items() if k != "upstream")

    def _op(self, system: str, kind: str, model: str, api: str):  # type: ignore[no-untyped-def]
        if system == "trunkline":
            assert self.ops is not None
            provider = ANTHROPIC_PROVIDER if api == "anthropic" else OPENAI_PROVIDER
            name = f"{provider}:{model}"
            return (lambda: self.ops.complete(name)) if kind == "complete" else (lambda: self.ops.stream(name))
        if system == "skeleton":
            skeleton = self.skeleton
            assert skeleton is not None
            return lambda: skeleton.complete(model)
        target = {
            "floor": self.floor,
            "proxy": self.proxy_target,
            "portkey": self.portkey_targets.get(api),
            "door": self.door_target,
        }[system]
        assert target is not None
        if system == "door":
            model = f"{OPENAI_PROVIDER}:{model}"  # the door names trunkline's models
        return (lambda: target.complete(model, api)) if kind == "complete" else (lambda: target.stream(model, api))

    # -- the stages ---------------------------------------------------------------------------

    async def upstream_capacity(self) -> None:
        assert self.upstream is not None
        out = {}
        for kind in ("json", "sse"):
            meter = CpuMeter({"upstream": [self.upstream.pid]}, include_self=False).start()
            proc = await trio.run_process(
                [
                    sys.executable,
                    "-m",
                    "bench.upstream_capacity",
                    "--port",
                    str(self.port),
                    "--seconds",
                    str(self.plan.capacity_s),
                    "--connections",
                    "16",
                    "--kind",
                    kind,
                ],
                cwd=str(REPO),
                capture_stdout=True,
            )
            cpu = meter.stop()["upstream"]
            res = json.loads(proc.stdout)
            rps = res["requests"] / res["wall_s"]
            per_req = cpu / res["requests"] if res["requests"] else math.nan
            out[kind] = {
                "rps": rps,
                "upstream_cpu_util": cpu / res["wall_s"],
                "upstream_us_per_request": per_req * 1e6,
                "capacity_rps_one_core": 1 / per_req if per_req else math.nan,
                "chunks_per_request": res["chunks_per_request"],
            }
        self.results["upstream_capacity"] = out

    async def latency(self, rep: int) -> None:
        p = self.plan
        for conc in p.concurrencies:
            for system in self.systems():
                # One content chunk: trunkline streams a whole-response request from the
                # provider (a long answer is then bounded by the idle timeout, not retried
                # whole), and this measures a short answer; the streams stage measures chunks.
                cell = await self.cell(
                    system, "complete", "bench-c1", conc, duration_s=p.cell_s, count=p.cell_count, warmup=p.warmup
                )
                self.results["latency"].setdefault(str(conc), {}).setdefault(system, []).append(cell)

    async def skeleton_latency(self, rep: int) -> None:
        """The floor, the skeleton and trunkline in turn, one request at a time: the
        skeleton's added latency is what the hops cost, trunkline's beyond it its own work."""
        p = self.plan
        await self.start_skeleton()
        # The machine's other work shows in every figure here: the report prints it beside them.
        self.results["skeleton"].setdefault("loadavg", []).append(os.getloadavg()[0])
        systems = ("floor", "skeleton", "trunkline")
        ops = {system: self._op(system, "complete", "bench-c1", "openai") for system in systems}
        for system in systems:
            await closed_loop(ops[system], 1, count=p.warmup, duration_s=p.cell_s)
        samples: dict[str, list[float]] = {system: [] for system in systems}
        totals: dict[str, dict[str, Any]] = {
            system: {"cpu": {}, "wall_s": 0.0, "errors": 0, "first_error": None} for system in systems
        }
        for _ in range(p.skeleton_turns):
            for system in systems:
                meter = CpuMeter(self.groups_for(system)).start()
                result = await closed_loop(
                    ops[system], 1, count=p.cell_count // p.skeleton_turns, duration_s=p.cell_s / p.skeleton_turns
                )
                total = totals[system]
                for name, used in meter.stop().items():
                    total["cpu"][name] = total["cpu"].get(name, 0.0) + used
                total["wall_s"] += result.wall_s
                total["errors"] += result.errors
                total["first_error"] = total["first_error"] or result.first_error
                samples[system].extend(result.samples)
        for system in systems:
            total = totals[system]
            cell = {**total, **asdict(Summary.of(samples[system], total["wall_s"]))}
            cell["cpu_system_s"] = self._system_cpu(system, total["cpu"])
            self.results["skeleton"].setdefault("c1", {}).setdefault(system, []).append(cell)
        self.results["skeleton"]["loadavg"].append(os.getloadavg()[0])

    async def start_skeleton(self) -> Skeleton:
        if self.skeleton is None:
            assert self._nursery is not None
            self.skeleton = await Skeleton(self.port, self.logs / "skeleton.log").start(self._nursery)
        return self.skeleton

    async def stop_skeleton(self) -> None:
        if self.skeleton is not None:
            skeleton, self.skeleton = self.skeleton, None
            await skeleton.stop()

    async def streams(self, rep: int) -> None:
        p = self.plan
        model = f"bench-c{p.stream_chunks}"
        for system in self.systems():
            cell = await self.cell(
                system, "stream", model, 1, duration_s=p.stream_s, count=p.stream_count, warmup=p.warmup
            )
            self.results["streams"].setdefault(system, []).append(cell)

    async def anthropic(self, rep: int) -> None:
        p = self.plan
        for kind, model in (("complete", "bench-claude-c1"), ("stream", f"bench-claude-c{p.stream_chunks}")):
            for system in self.anthropic_systems():
                cell = await self.cell(
                    system,
                    kind,
                    model,
                    1,
                    duration_s=p.stream_s,
                    count=p.stream_count,
                    warmup=p.warmup,
                    api="anthropic",
                )
                self.results["anthropic"].setdefault(kind, {}).setdefault(system, []).append(cell)

    def anthropic_systems(self) -> list[str]:
        """LiteLLM's proxy is left out here: it cannot take the Rust path (see bench/README.md)."""
        return ["floor", "trunkline"] + (list(SDK_SYSTEMS) if self.sdk else []) + (["portkey"] if self.portkey else [])

    async def event_throughput(self, rep: int) -> None:
        p = self.plan
        model = f"bench-c{p.events_chunks}"
        for system in ("floor", "trunkline"):
            cell = await self.cell(
                system, "stream", model, p.events_concurrency, duration_s=p.events_s, count=10**9, warmup=p.warmup
            )
            cell["system"] = system
            self.results["events"].append(cell)

    async def http(self, rep: int) -> None:
        """The same httpx client against the upstream, the front door and the HTTP peers. The
        door's daemon runs for this stage only, so it never idles beside the others."""
        p = self.plan
        await self.start_door()
        try:
            for kind, conc in HTTP_CELLS:
                model = "bench-c1" if kind == "complete" else f"bench-c{p.stream_chunks}"
                duration_s, count = (p.cell_s, p.cell_count) if kind == "complete" else (p.stream_s, p.stream_count)
                for system in self.http_systems():
                    cell = await self.cell(
                        system, kind, model, conc, duration_s=duration_s, count=count, warmup=p.warmup
                    )
                    self.results["http"].setdefault(f"{kind} {conc}", {}).setdefault(system, []).append(cell)
        finally:
            await self.stop_door()

    def http_systems(self) -> list[str]:
        return [
            s
            for s in HTTP_SYSTEMS
            if s in ("floor", "door") or (s == "proxy" and self.proxy) or (s == "portkey" and self.portkey)
        ]

    async def start_door(self) -> None:
        self.door = await Daemon(self.port, self.logs / "daemon-door.log", http=True).start()
        self.door_target = HttpTarget(self.door.http_url + "/v1", {"authorization": f"Bearer {DOOR_KEY}"})
        await trio.sleep(self.plan.settle_s)
        if not self.results["door"]:  # the first repeat's, just started
            self.results["door"] = {"rss_idle_mb": self._door_rss(), "processes": len(self.door.doors)}

    def _door_rss(self) -> dict[str, float]:
        assert self.door is not None
        return {"front door": sum(rss_mb(pid) for pid in self.door.doors), **self.door.rss()}

    async def stop_door(self) -> None:
        if self.door_target is not None:
            await self.door_target.aclose()
            self.door_target = None
        if self.door is not None:
            await trio.sleep(self.plan.settle_s)
            self.results["door"]["rss_after_mb"] = self._door_rss()  # the last repeat's counts
            await self.door.stop()
            self.door = None

    async def subscribers(self) -> None:
        p = self.plan
        assert self.daemon is not None
        model = f"{OPENAI_PROVIDER}:bench-c{p.events_chunks}"
        for n in p.subscribers:
            procs = [
                LineProcess(
                    [sys.executable, "-m", "bench.subscriber", "--runtime-dir", str(self.daemon.runtime_dir)],
                    cwd=str(REPO),
                    log=self.logs / "subscribers.log",
                )
                for _ in range(n)
            ]
            try:
                for proc in procs:
                    await proc.start()
                for proc in procs:
                    line = await proc.readline(120)
                    if not line.startswith("READY"):
                        raise RuntimeError(f"subscriber said {line!r}")
                per = max(1, p.subscriber_streams_in_flight // n)
                meter = CpuMeter(self.trunkline_groups(), include_self=False).start()
                t0 = time.perf_counter()
                replies: list[dict] = []

                async def run_one(proc: LineProcess) -> None:
                    replies.append(await proc.call({"model": model, "concurrency": per, "duration_s": p.subscriber_s}))

                async with trio.open_nursery() as nursery:
                    for proc in procs:
                        nursery.start_soon(run_one, proc)
                wall = time.perf_counter() - t0
                cpu = meter.stop()
                self.results["subscribers"][str(n)] = {
                    "subscribers": n,
                    "streams_in_flight": per * n,
                    "wall_s": wall,
                    "cpu": cpu,
                    "streams": sum(r["streams"] for r in replies),
                    "events": sum(r["events"] for r in replies),
                    "deltas": sum(r["deltas"] for r in replies),
                    "lost": sum(r["lost"] for r in replies),
                    "recovered": sum(r["recovered"] for r in replies),
                    "errors": sum(r["errors"] for r in replies),
                    "first_error": next((r["first_error"] for r in replies if r["first_error"]), None),
                    "client_cpu_s": sum(r["cpu_s"] for r in replies),
                }
            finally:
                for proc in procs:
                    await proc.stop()

    def memory_now(self) -> dict[str, dict[str, float]]:
        """RSS and PSS of the supervisor, each worker and this process (the client)."""
        assert self.daemon is not None
        me = os.getpid()
        return {"rss": {**self.daemon.rss(), "client": rss_mb(me)}, "pss": {**self.daemon.pss(), "client": pss_mb(me)}}

    async def memory_after(self, key: str) -> None:
        """Called after every heavy stage, once it has settled, so that the report shows
        memory growth under the stage that caused it."""
        await trio.sleep(self.plan.settle_s)
        self.results["memory"][key] = self.memory_now()

    async def memory_open_streams(self) -> None:
        assert self.client is not None
        assert self.ops is not None
        assert self.daemon is not None
        n = self.plan.open_streams
        request = self.ops.request(f"{OPENAI_PROVIDER}:bench-c2-h120")
        opened = failed = 0
        all_open = trio.Event()
        release = trio.Event()
        client = self.client

        async def hold() -> None:
            nonlocal opened, failed
            try:
                async with client.stream(request) as s:
                    async for ev in s:
                        if type(ev) is TextDelta:
                            break
                    opened += 1
                    if opened + failed == n:
                        all_open.set()
                    await release.wait()
            except Exception:  # noqa: BLE001 - counted and reported
                failed += 1
                if opened + failed == n:
                    all_open.set()

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(hold)
            with trio.move_on_after(120):
                await all_open.wait()
            open_s = time.perf_counter() - t0
            await trio.sleep(self.plan.settle_s / 2)
            sample = self.memory_now()
            release.set()
        with trio.move_on_after(30):
            while await self.daemon.in_flight():
                await trio.sleep(0.1)
        self.results["memory"]["open_streams"] = {
            **sample,
            "requested": n,
            "opened": opened,
            "failed": failed,
            "open_s": open_s,
        }

    async def hop_trace(self) -> None:
        """On a daemon of its own, started with TRUNKLINE_TRACE_HOPS=1 (the stamps cost
        two bus events per request, which no other measurement should pay)."""
        assert self.floor is not None
        n = self.plan.hop_samples
        traced = await Daemon(self.port, self.logs / "daemon-traced.log", trace_hops=True).start()
        try:
            skeleton: Skeleton | None = None
            async with self.stage("skeleton start (for the hop trace)"):
                skeleton = await self.start_skeleton()  # if it cannot start, trunkline's hops are traced alone
            self.results["hops"] = await hops.trace(self.floor, str(traced.runtime_dir), n, skeleton)
            self.results["hops"]["status_rtt_us"] = await hops.control_round_trip(str(traced.runtime_dir), n)
        finally:
            await self.stop_skeleton()
            await traced.stop()

    async def soak(self) -> None:
        assert self.ops is not None
        assert self.daemon is not None
        seconds = self.plan.soak_minutes * 60
        interval = max(0.5, seconds / 120)
        ops = self.ops
        samples: list[dict[str, float]] = []
        stream_model, complete_model = f"{OPENAI_PROVIDER}:bench-c50", f"{OPENAI_PROVIDER}:bench-c1"
        meter = CpuMeter(self.trunkline_groups()).start()
        t0 = time.perf_counter()
        results: dict[str, LoadResult] = {}

        async def sample_memory() -> None:
            while True:
                samples.append({"t": time.perf_counter() - t0, **self.daemon.rss(), "client": rss_mb(os.getpid())})
                await trio.sleep(interval)

        async def run(name: str, op: Any) -> None:
            results[name] = await closed_loop(op, 8, count=10**12, duration_s=seconds, samples=Totals())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample_memory)
            async with trio.open_nursery() as load:
                load.start_soon(run, "stream", lambda: ops.stream(stream_model))
                load.start_soon(run, "complete", lambda: ops.complete(complete_model))
            nursery.cancel_scope.cancel()
        samples.append({"t": time.perf_counter() - t0, **self.daemon.rss(), "client": rss_mb(os.getpid())})
        cpu = meter.stop()
        keys = [k for k in samples[0] if k != "t"]
        half = [s for s in samples if s["t"] >= samples[-1]["t"] / 2]
        streams = results["stream"].samples
        self.results["soak"] = {
            "minutes": self.plan.soak_minutes,
            "wall_s": time.perf_counter() - t0,
            "cpu": cpu,
            "streams": len(streams),
            "completes": len(results["complete"].samples),
            "events": streams.sum(3),
            "lost": streams.sum(4),
            "recovered": streams.sum(5),
            "errors": results["stream"].errors + results["complete"].errors,
            "first_error": results["stream"].first_error or results["complete"].first_error,
            "rss": {
                k: {
                    "start": samples[0][k],
                    "end": samples[-1][k],
                    "max": max(s[k] for s in samples),
                    "slope_second_half_mb_per_min": slope_per_minute([(s["t"], s[k]) for s in half]),
                }
                for k in keys
            },
            "samples": samples,
        }

    # -- the whole run ------------------------------------------------------------------------

    async def run(self) -> int:
        t_start = time.time()
        self.results["machine"] = machine()
        self.results["only"] = sorted(self.only)
        self.results["versions"] = versions()
        cpu0 = self_cpu()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                async with self.stage("upstream"):
                    await self.start_upstream()
                if self.upstream is None or not self.port:
                    raise _Fatal("the fake upstream did not start")
                async with self.stage("upstream capacity"):
                    await self.upstream_capacity()
                async with self.stage("trunkline start"):
                    await self.start_trunkline(nursery)
                if self.daemon is None or not self.daemon.workers:
                    raise _Fatal("trunkline did not start")
                self.results["versions"]["trunkline_server"] = self.daemon.version
                async with Client(self.daemon.runtime_dir, client_name="bench") as client:
                    self.client = client
                    self.ops = TrunklineOps(client)
                    await self.measure()
            except _Fatal:
                pass  # already recorded by its stage; the report says what could not run
            finally:
                with trio.CancelScope(shield=True):
                    await self.shutdown()
                nursery.cancel_scope.cancel()
        self.results["duration_s"] = time.time() - t_start
        self.results["started"] = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t_start))
        self.results["bench_cpu_s"] = self_cpu() - cpu0
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(report.render(self.results))
        self.out.with_suffix(".json").write_text(json.dumps(self.results, indent=1, default=str))
        print(f"bench: wrote {self.out}", file=sys.stderr)
        return 1 if self.results["failures"] else 0

    def wants(self, stage: str) -> bool:
        return not self.only or stage in self.only

    async def measure(self) -> None:
        async with self.stage("memory idle"):
            await self.memory_after("idle")
        if self.wants("latency") or self.wants("anthropic") or self.wants("http"):
            async with self.stage("peers start"):
                await self.start_peers()
        for rep in range(self.plan.repeats):
            # The skeleton stage opens each repeat, so trunkline's daemon comes to it idle (from
            # its start, or from the HTTP stage, whose daemon is its own), as the skeleton's
            # processes do. In the ~10 s after a burst of 256 in flight, each of trunkline's
            # processes costs 0.1-0.3 ms more per request (docs/ARCHITECTURE.md): right after
            # the latency stage, that transient, not the hot path, is what the stage measured.
            for key, name, run in (
                ("skeleton", "skeleton", self.skeleton_latency),
                ("latency", "latency", self.latency),
                ("streams", "streams", self.streams),
                ("anthropic", "anthropic", self.anthropic),
                ("events", "event throughput", self.event_throughput),
                ("http", "HTTP front door", self.http),
            ):
                if self.wants(key):
                    async with self.stage(f"{name} repeat {rep + 1}"):
                        await run(rep)
        await self.stop_skeleton()
        if self.wants("memory"):
            async with self.stage("memory after the repeats"):
                await self.memory_after("after_repeats")
        if self.wants("subscribers"):
            async with self.stage("subscribers"):
                await self.subscribers()
        if self.wants("memory"):
            async with self.stage("memory after subscribers"):
                await self.memory_after("after_subscribers")
            async with self.stage("memory with open streams"):
                await self.memory_open_streams()
            async with self.stage("memory idle after load"):
                await self.memory_after("after_load")
                if self.proxy:
                    self.results["peers"]["proxy"]["rss_after_mb"] = self.proxy.rss()
        if self.wants("hops"):
            async with self.stage("hop trace"):
                await self.hop_trace()
        if self.wants("warm_start"):
            async with self.stage("warm start"):
                p = self.plan
                self.results["warm_start"] = await warm_start.measure(
                    self.port, self.logs, p.repeats, p.warm_kills, p.settle_s
                )
        if self.wants("soak"):
            async with self.stage("soak"):
                await self.soak()

    async def shutdown(self) -> None:
        await self.stop_skeleton()
        for target in (self.floor, self.proxy_target, self.door_target, *self.portkey_targets.values()):
            if target is not None:
                await target.aclose()
        if self.door is not None:
            await self.door.stop()
        if self.portkey is not None:
            await self.portkey.stop()
        if self.sdk is not None:
            await self.sdk.stop()
        if self.proxy is not None:
            await self.proxy.stop()
        if self.daemon is not None:
            await self.daemon.stop()
        if self.upstream is not None:
            await self.upstream.stop()


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    with suppress(OSError):
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "memory": mem,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
    }


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("trunkline", "pynng", "trio", "httpx", "msgspec", "anyio"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "?"
    try:
        out["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out["commit"] = "?"
    return out


#: What `--only` may name.
STAGES = (
    "latency",
    "streams",
    "anthropic",
    "events",
    "http",
    "subscribers",
    "memory",
    "hops",
    "warm_start",
    "soak",
    "skeleton",
)


def main(plan: Plan, out: Path, peers: bool, only: frozenset[str] = frozenset()) -> int:
    return trio.run(Bench(plan, out, peers, only).run)
