"""Stage `warm_start`: workers forked by the fork server against workers spawned, in the
same run, taking turns (spawn, fork server, spawn, fork server...).

For each way (`supervision.worker_start`), each repeat starts a daemon of its own
with the benchmark's five workers and measures:

* the cold start: `trunkline serve` launched -> `status` answers with every worker
  running (wall time, polled every 5 ms), and the CPU the daemon's processes spent
  on it (supervisor, workers and fork server, from /proc);
* the memory of the supervisor and its five idle workers (and the fork server, which
  is the daemon's too): the sum of their PSS, settled after the start;
* a worker killed: `kill -9` of the OpenAI-compatible worker -> its successor's
  `worker.up` on the bus, and -> the first request completed through it (sent at
  `worker.up`). The daemon's restart window is 0.1 s here and the kills are 0.3 s
  apart, so each kill is one crash after a healthy run, restarted without the pause
  a crash loop gets; the restart intensity is raised so the kills never trip it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from trunkline import Client

from .procs import cpu_seconds, pss_mb, tree
from .stats import Spread
from .trunkline_runner import OPENAI_PROVIDER, Daemon

WAYS = ("spawn", "forkserver")
#: The issue's targets.
RESTART_GOAL_MS = 50.0
PSS_GOAL_MB = 100.0
COLD_START_GOAL_RATIO = 2.0


async def measure(port: int, logs: Path, repeats: int, kills: int, settle_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {
        way: {"cold_s": [], "cold_cpu_s": [], "pss_mb": [], "up_ms": [], "request_ms": []} for way in WAYS
    }
    for _ in range(repeats):
        for way in WAYS:
            await _one(out[way], way, port, logs, kills, settle_s)
    out["kills"] = kills
    return out


async def _one(into: dict[str, Any], way: str, port: int, logs: Path, kills: int, settle_s: float) -> None:
    daemon = Daemon(
        port,
        logs / f"daemon-{way}.log",
        extra={
            "supervision": {
                "worker_start": way,
                "restart_window_s": 0.1,
                "max_restarts": 1000,
            }
        },
        poll_s=0.005,
    )
    started = time.perf_counter()
    try:
        await daemon.start()
        into["cold_s"].append(time.perf_counter() - started)
        into["cold_cpu_s"].append(sum(cpu_seconds(p) for p in tree(daemon.pid)))
        await trio.sleep(settle_s)
        parts = {pid: pss_mb(pid) for pid in tree(daemon.pid)}
        into["pss_mb"].append(sum(parts.values()))
        into.setdefault("pss_parts", []).append(_parts(daemon, parts))
        async with Client(daemon.runtime_dir, client_name="bench-warm", watch_bus=True) as client:
            model = f"{OPENAI_PROVIDER}:bench-c1"
            await client.complete(model, "warm")
            for _ in range(kills):
                pid = {w.provider: w.pid for w in (await client.status()).workers}[OPENAI_PROVIDER]
                assert pid is not None
                await trio.sleep(0.3)  # past the restart window: one crash after a healthy run
                killed = time.perf_counter()
                os.kill(pid, signal.SIGKILL)
                while True:
                    ev = await client.bus_events.receive()
                    if ev.name == "worker.up" and ev.provider == OPENAI_PROVIDER and ev.detail != f"pid {pid}":
                        break
                into["up_ms"].append((time.perf_counter() - killed) * 1000)
                await client.complete(model, "back")
                into["request_ms"].append((time.perf_counter() - killed) * 1000)
    finally:
        await daemon.stop()


def _parts(daemon: Daemon, pss: dict[int, float]) -> dict[str, float]:
    workers = set(daemon.workers.values())
    return {
        "supervisor": pss.get(daemon.pid, 0.0),
        "workers": sum(v for p, v in pss.items() if p in workers),
        "fork server": sum(v for p, v in pss.items() if p != daemon.pid and p not in workers),
    }


def render(res: dict[str, Any], add: Callable[[str], None], goals: list[tuple[str, str, str, str]]) -> None:
    from .report import _spread, _table, _verdict  # report.py renders this section: imported here, not at the top

    add("## 9. Warm workers: the fork server against spawn")
    add("")
    warm = res.get("warm_start") or {}
    if not warm:
        add("Not run.")
        add("")
        return
    add(
        "Each way starts daemons of its own (the benchmark's five workers), in turns: spawn, fork server, spawn... "
        f"A worker killed: {warm.get('kills', 0)} `kill -9` of the OpenAI-compatible worker per daemon, each one "
        "crash after a healthy run (its restart window is 0.1 s, the kills 0.3 s apart), timed to its successor's "
        "`worker.up` and to a request completed through it. PSS: supervisor + workers (+ the fork server) idle, "
        "summed. Cold start: `serve` launched until `status` shows every worker running; its CPU is the daemon's "
        "processes'."
    )
    add("")
    spawn, fork = warm["spawn"], warm["forkserver"]
    rows = [
        ("cold start (s)", "cold_s", 1.0, 3),
        ("cold start CPU (s)", "cold_cpu_s", 1.0, 2),
        ("supervisor + 5 idle workers, PSS (MiB)", "pss_mb", 1.0, 1),
        ("kill -9 -> worker.up (ms)", "up_ms", 1.0, 1),
        ("kill -9 -> first request completed (ms)", "request_ms", 1.0, 1),
    ]
    table = []
    for label, key, scale, digits in rows:
        a, b = Spread.of(spawn[key]).mid, Spread.of(fork[key]).mid
        table.append([label, _spread(spawn[key], scale, digits), _spread(fork[key], scale, digits), f"{a / b:.2f}×"])
    for line in _table(["", "spawn", "fork server", "spawn / fork server"], table):
        add(line)
    add("")
    parts = fork.get("pss_parts") or []
    if parts:
        mid = parts[len(parts) // 2]
        add(
            "PSS of the fork server's daemon, one start: "
            + ", ".join(f"{name} {mb:.1f} MiB" for name, mb in mid.items())
            + "."
        )
        add("")
    up = Spread.of(fork["up_ms"]).mid
    request = Spread.of(fork["request_ms"]).mid
    pss = Spread.of(fork["pss_mb"]).mid
    ratio = Spread.of(spawn["cold_s"]).mid / Spread.of(fork["cold_s"]).mid
    goals += [
        (
            "fork server: kill -9 -> worker.up",
            f"<= {RESTART_GOAL_MS:g} ms",
            f"{up:.1f} ms",
            _verdict(up, RESTART_GOAL_MS + 1e-9),
        ),
        (
            "fork server: kill -9 -> first request completed",
            f"<= {RESTART_GOAL_MS:g} ms",
            f"{request:.1f} ms",
            _verdict(request, RESTART_GOAL_MS + 1e-9),
        ),
        (
            "fork server: supervisor + 5 idle workers PSS",
            f"<= {PSS_GOAL_MB:g} MiB",
            f"{pss:.1f} MiB",
            _verdict(pss, PSS_GOAL_MB + 1e-9),
        ),
        (
            "fork server: cold start, spawn's over the fork server's",
            f">= {COLD_START_GOAL_RATIO:g}×",
            f"{ratio:.2f}×",
            _verdict(ratio, COLD_START_GOAL_RATIO, higher_is_better=True),
        ),
    ]
